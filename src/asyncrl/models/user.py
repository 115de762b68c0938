"""Encoders of the user's own: ``--encoder package.module:Class`` on the command line,
``asyncrl.train(encoder=Class)`` in Python (docs/spaces.md#your-own-encoder).

The interface is Stable-Baselines3's features extractor (``BaseFeaturesExtractor``: built on
the observation space, a ``features_dim`` attribute, ``forward(obs) -> (B, features_dim)``),
with two differences:

* the class is built as ``Class(observation_space, **encoder_kwargs)``: asyncrl passes no
  ``features_dim`` (SB3's constructor takes one); the class sets the attribute itself, and
  ``--encoder-kwargs`` gives it any argument it wants;
* ``forward`` gets the observations as the env gives them, with a leading batch axis: a Box's
  in its dtype (``uint8`` frames unscaled), a Dict's as a dict of tensors and a Tuple's as a
  tuple (nested as the space is), Discrete values as integers (their ``start`` included), not
  one-hot. SB3 hands its extractors preprocessed floats (images divided by 255, one-hots);
  here the encoder decides (:func:`asyncrl.models.as_float` scales ``uint8`` to [0, 1]). The
  same values reach it when training, in ``Policy.act`` and in an exported module (whose
  ``obs`` input is the env's), so an encoder can be tried on
  ``torch.as_tensor(space.sample())[None]``.

asyncrl puts the core (``--core``) and the heads after it, as after its own encoders; its
parameters are shared by the workers and optimised with the rest. Its *buffers* are not
shared: each process builds its own copy, so they must be constants of the constructor
(checked: a forward that changes a buffer, BatchNorm's running statistics, is refused). The
observation normaliser (``--normalize-obs``) is not applied to its input.

The class travels by its import path, never pickled: the model's spec records
``module:QualName`` (:attr:`ModelSpec.encoder_class`), and every process that builds the model
-- a worker process, a Ray actor, a resumed run, :func:`asyncrl.load`, ``asyncrl export`` --
imports it. The main process checks it once, on the env's observation space, before anything
is written (:func:`check_encoder`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from torch import nn

from asyncrl.errors import UserError
from asyncrl.models.spec import ModelSpec
from asyncrl.spaces import ObsLeaf, nest, space_from_json

DOCS = "docs/spaces.md#your-own-encoder"


def encoder_path(encoder: Any) -> str:
    """The import path ``module:QualName`` of an encoder class given in Python (a string is
    taken as it is): what the config and the model's spec record. A class no other process
    could import by it (one defined inside a function) is refused with one line."""
    if isinstance(encoder, str):
        return encoder
    if isinstance(encoder, nn.Module):
        raise UserError(
            f"encoder: give the class ({type(encoder).__name__}), not an instance of it: "
            "asyncrl builds it in each process, on the env's observation space"
        )
    if not isinstance(encoder, type):
        raise UserError(
            f"encoder: give an nn.Module class or a 'package.module:Class' string, got "
            f"{type(encoder).__name__} {encoder!r}"
        )
    module, qual = encoder.__module__, encoder.__qualname__
    if "<locals>" in qual:
        raise UserError(
            f"encoder: {encoder.__name__} is defined inside a function ({module}:{qual}), where "
            "no other process can import it: define it at the top level of a module"
        )
    path = f"{module}:{qual}"
    if module != "__main__" and _lookup(path) is not encoder:
        raise UserError(
            f"encoder: importing {path} does not give back the class {encoder.__name__} given "
            "(made by a factory, or its module reloaded): define it at the top level of a module"
        )
    return path


def _lookup(path: str) -> Any:
    """What ``path`` names, or None where it names nothing (no check of what it is)."""
    module, _, qual = path.partition(":")
    obj: Any = sys.modules.get(module)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return obj


def import_encoder(path: str) -> type[nn.Module]:
    """The class ``path`` (``package.module:QualName``) names, imported as ``--env``'s
    ``module:EnvId`` is (the working directory tried where the module is not found); one line
    (:class:`UserError`) where the module or the attribute is missing or it is no
    ``nn.Module`` subclass."""
    from asyncrl.envs import _import_env_module

    module, sep, qual = path.partition(":")
    if not sep or not module or not qual:
        raise UserError(f"--encoder: give package.module:Class, got {path!r}")
    try:
        _import_env_module(module)
    except ModuleNotFoundError as e:
        itself = e.name is not None and (module == e.name or module.startswith(e.name + "."))
        if itself:
            raise UserError(
                f"--encoder: no module named {module!r} for {qual} (run from the directory "
                "that holds it, or add that directory to PYTHONPATH)"
            ) from None
        raise UserError(f"--encoder: importing {module!r} failed: {_one_line(e)}") from None
    except Exception as e:  # the module's own code raised
        raise UserError(f"--encoder: importing {module!r} failed: {_one_line(e)}") from None
    obj: Any = sys.modules[module]
    for part in qual.split("."):
        if not hasattr(obj, part):
            if module == "__main__":
                raise UserError(
                    f"--encoder: {path} was defined in the script that trained the run, which "
                    "this program is not: move the class into a module of its own and load "
                    "the run from where that module imports"
                )
            raise UserError(f"--encoder: module {module!r} has no {qual!r}{_classes_in(module)}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        what = f"a {type(obj).__name__}" if not isinstance(obj, type) else "a class"
        raise UserError(
            f"--encoder: {path} is {what}, not an nn.Module subclass: an encoder is a "
            f"torch.nn.Module class, built as Class(observation_space) ({DOCS})"
        )
    return obj


def _classes_in(module: str) -> str:
    """`` (its nn.Module classes: A, B)``, the hint of a missing attribute."""
    found = sorted(
        name
        for name, v in vars(sys.modules[module]).items()
        if isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == module
    )
    return f" (its nn.Module classes: {', '.join(found)})" if found else ""


def _one_line(e: BaseException) -> str:
    first = next(iter(str(e).splitlines()), "")
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def encoder_kwargs(spec: ModelSpec) -> dict[str, Any]:
    from asyncrl.envs import parse_env_kwargs

    return parse_env_kwargs(spec.encoder_kwargs, "--encoder-kwargs")


def _torch_dtype(name: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, np.dtype(name))).dtype


class UserEncoder(nn.Module):
    """The user's encoder in the network: it gives the user's module (``net``) each batch in
    the observation space's structure and dtypes, and puts out its features. A Dict or Tuple
    observation arrives packed into rows (:mod:`asyncrl.spaces`); each leaf is read back out of
    them in its own shape (a view), its ``start`` added back and cast to the space's dtype, and
    the leaves are nested as the space nests them. A Box arrives as it is."""

    def __init__(self, spec: ModelSpec, net: nn.Module | None = None):
        super().__init__()
        self.path = spec.encoder_class
        self.observation_space = space_from_json(spec.obs_space)
        if net is None:
            net = import_encoder(self.path)(self.observation_space, **encoder_kwargs(spec))
        self.net = net
        self.out_dim = int(getattr(net, "features_dim", 0))
        self.obs_shape = spec.obs_shape
        layout = spec.obs_layout
        self._leaves: list[tuple[ObsLeaf, torch.dtype, torch.Tensor | None]] = []
        for leaf in layout.leaves if layout is not None else ():
            start = None
            if leaf.start and any(leaf.start):
                start = torch.tensor(leaf.start, dtype=torch.int64).reshape(leaf.shape)
            self._leaves.append((leaf, _torch_dtype(leaf.dtype), start))

    def observation(self, obs: torch.Tensor) -> Any:
        """The batch ``obs`` (packed rows, or a Box's observations) as the user's module takes
        it: in the space's structure, a leading batch axis on each tensor."""
        if not self._leaves:
            return obs.reshape(-1, *self.obs_shape)
        rows = obs.reshape(-1, obs.shape[-1])
        n = rows.shape[0]
        values = []
        for leaf, dtype, start in self._leaves:
            v = rows[:, leaf.offset : leaf.offset + leaf.size].reshape(n, *leaf.shape)
            if start is not None:
                v = v.to(torch.int64) + start
            values.append((leaf, v.to(dtype)))
        return nest(values)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(self.observation(obs))

    def learning_layout(self, obs: np.ndarray) -> None:
        """Read as stored (see :meth:`asyncrl.models.ConvEncoder.learning_layout`)."""
        return None


def what_forward_takes(space: Any) -> str:
    """What the user's ``forward`` receives, in words (for the messages)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return "a dict of tensors, one a key, each with a leading batch axis"
    if isinstance(space, gym.spaces.Tuple):
        return "a tuple of tensors, each with a leading batch axis"
    shape = ", ".join(["B", *(str(d) for d in space.shape or ())])
    return f"one tensor ({shape}) of dtype {space.dtype}"


def _words(space: Any) -> str:
    """A space as one line (a Box's repr spreads its bounds over runs of spaces)."""
    return " ".join(str(space).split())


def check_encoder(spec: ModelSpec, backend: str) -> None:
    """Refuse, with one line, an encoder of the user's own that cannot run: a class the
    ``backend``'s workers cannot import (one in ``__main__`` off the threads backend), one
    that is missing or no ``nn.Module``, whose constructor fails on the observation space,
    which has no int ``features_dim``, float64 parameters, a forward that fails on a batch of
    two observations from the space or puts out anything but ``(2, features_dim)`` float32
    with a gradient, or buffers the workers' copies would not agree on. Built once here, in
    the main process, before anything is written: the workers then build it as it was."""
    path = spec.encoder_class
    module, _, qual = path.partition(":")
    if module == "__main__" and backend != "threads":
        raise UserError(
            f"--encoder: {qual} is defined in the script you run (__main__), which the "
            f"{backend} backend's workers cannot import: move it into a module of its own "
            f"(my_encoders.py) and pass my_encoders:{qual}, or use --backend threads"
        )
    cls = import_encoder(path)
    space = space_from_json(spec.obs_space)
    kwargs = encoder_kwargs(spec)
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())

    def build(seed: int) -> nn.Module:
        with torch.random.fork_rng():  # the run's own seeding stays as it was
            torch.manual_seed(seed)
            try:
                return cls(space, **kwargs)
            except Exception as e:
                raise UserError(
                    f"--encoder: {qual}(observation_space{args}) failed: {_one_line(e)}; it is "
                    "built as Class(observation_space, **encoder_kwargs), with "
                    f"{_words(space)} ({DOCS})"
                ) from None

    net = build(0)
    dim = getattr(net, "features_dim", None)
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        got = "none" if dim is None else repr(dim)
        raise UserError(
            f"--encoder: {path} needs an int attribute features_dim > 0, the width of its "
            f"output (got {got}): set self.features_dim in __init__ ({DOCS})"
        )
    wrong = [n for n, p in net.named_parameters() if p.dtype != torch.float32]
    if wrong:
        raise UserError(
            f"--encoder: {path}'s parameter {wrong[0]} is not float32; asyncrl shares and "
            "optimises float32 parameters: build it in float32 (no .double(), no .half())"
        )
    buffers = {n: b.detach().clone() for n, b in net.named_buffers()}
    space.seed(0)
    samples = [space.sample() for _ in range(2)]
    layout = spec.obs_layout
    if layout is None:
        rows = np.stack([np.asarray(s, spec.obs_dtype) for s in samples])
    else:
        rows = np.stack([layout.pack(s) for s in samples])
    encoder = UserEncoder(spec, net)
    try:
        out = encoder(torch.from_numpy(rows))
    except Exception as e:
        raise UserError(
            f"--encoder: {path}'s forward failed on two observations sampled from {_words(space)} "
            f"({_one_line(e)}); it takes {what_forward_takes(space)}, as the env gives them "
            f"({DOCS})"
        ) from None
    if not isinstance(out, torch.Tensor):
        raise UserError(
            f"--encoder: {path}'s forward returned a {type(out).__name__}; it must return one "
            f"tensor (B, features_dim) of float32 ({DOCS})"
        )
    if out.dtype != torch.float32 or tuple(out.shape) != (2, int(dim)):
        raise UserError(
            f"--encoder: {path}'s forward returned {out.dtype} {tuple(out.shape)} for a batch "
            f"of 2; it must return (B, features_dim) = (2, {int(dim)}) float32 ({DOCS})"
        )
    if any(p.requires_grad for p in net.parameters()) and not out.requires_grad:
        raise UserError(
            f"--encoder: {path}'s output carries no gradient to its parameters (a detach() "
            "or torch.no_grad() in forward?): asyncrl learns them through it"
        )
    for name, before in buffers.items():
        now = dict(net.named_buffers())[name]
        if not torch.equal(before, now):
            raise UserError(
                f"--encoder: {path}'s forward changes its buffer {name!r} (BatchNorm's running "
                "statistics?); asyncrl's workers share parameters, not buffers: use LayerNorm, "
                "or BatchNorm with track_running_stats=False"
            )
    if buffers:
        other = dict(build(1).named_buffers())
        for name, before in buffers.items():
            if name in other and not torch.equal(before, other[name]):
                raise UserError(
                    f"--encoder: {path}'s buffer {name!r} differs from one build to the next "
                    "(drawn at random?); each process builds its own and buffers are not "
                    "shared: make it an nn.Parameter (requires_grad=False keeps it fixed)"
                )
