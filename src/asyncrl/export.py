"""``asyncrl export``: a trained policy as a standalone module, ONNX (run by onnxruntime with
NumPy alone, no PyTorch) or TorchScript (run by PyTorch alone, no asyncrl).

The module wraps the network call evaluation acts through (``Network.act``, then the greedy
action :meth:`~asyncrl.algos.base.Algorithm.eval_step` takes), as Stable-Baselines3's docs
export a policy through a small wrapper module ("Exporting models"), with what lies around it
inside: the observation normaliser's frozen statistics, the 1/255 of uint8 frames, the Box
action's clipping or tanh squashing into the bounds (:meth:`ActionSpace.to_env`), the core's
context of the previous action and reward. The arithmetic is float32 whatever the run trained
in (a bfloat16 conv encoder is rebuilt in float32; the space-to-depth form of the first layer is
a learning-pass layout, never taken for the env's own images).

The interface (docs/export.md), batch axis first everywhere:

* inputs: ``obs`` (the observation space's dtype); ``action_mask`` (bool, where the run's env
  has masks); ``state`` ``(B, rows * core_size)`` for a recurrent core (the LSTM's h then c,
  concatenated; zeros start an episode); ``prev_action`` and ``prev_reward`` for a core that
  takes them (``--prev-action-reward``).
* outputs: ``action``; then ``logits`` (Discrete actor-critic), ``q_values`` (the Q methods) or
  ``mean`` (the Gaussian's, before clipping or squashing); then ``state_out`` for a recurrent
  core.

Extension points for observation and action spaces to come (each a function here, marked
EXTENSION): :func:`obs_ports` and :func:`pack_obs` (one input per leaf of a Dict or Tuple
observation), :func:`env_has_mask`, :func:`mask_width` and :func:`apply_mask` (the mask of
MultiDiscrete / MultiBinary actions), :func:`greedy_action` (their greedy action).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from asyncrl.errors import UserError
from asyncrl.models import ActorCritic, ModelSpec, QNetwork, build_model
from asyncrl.policy import Policy, Which, describe, load
from asyncrl.rundir import write_atomically

Format = Literal["onnx", "torchscript"]
FORMATS: tuple[Format, ...] = ("onnx", "torchscript")

#: the score of a masked action: sb3-contrib's MaskablePPO sets masked logits to -1e8
#: (``sb3_contrib/common/maskable/distributions.py``, ``HUGE_NEG``): finite, so a softmax over
#: it gives the masked action probability 0 and no NaN, and never wins an argmax against a
#: valid action's score
MASKED_SCORE = -1e8

#: the ONNX opset written: 17 is read by every onnxruntime since 1.14 (2023), and has every
#: operator these networks need
OPSET = 17

#: the metadata key (ONNX ``metadata_props``; TorchScript ``_extra_files``) holding the
#: interface as JSON
METADATA_KEY = "asyncrl"

INSTALL_HINT = 'pip install "asyncrl[export]"'


@dataclass(frozen=True)
class Port:
    """One input or output of the exported module: its name, shape (``"batch"`` first) and
    NumPy dtype name."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    doc: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """``name dtype[batch,4]``."""
        return f"{self.name} {self.dtype}[{','.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class Exported:
    """What :func:`export_policy` wrote: the file, its format and interface, and which model
    of the run it holds (in words, as ``asyncrl eval`` says it)."""

    path: Path
    format: Format
    inputs: list[Port]
    outputs: list[Port]
    model: str


# ---------------------------------------------------------------- observations (EXTENSION)
def obs_ports(spec: ModelSpec) -> list[Port]:
    """The observation's inputs, in the order the module takes them.

    EXTENSION (Dict and Tuple observations): one :class:`Port` per leaf, named ``obs.KEY``
    (Dict) or ``obs.0``, ``obs.1``, ... (Tuple), each in its leaf's shape and dtype, from the
    spec's description of the leaves; :func:`pack_obs` then packs them. The ``action_mask`` key
    of a Dict observation is no leaf here: it is the ``action_mask`` input."""
    return [
        Port(
            "obs",
            ("batch", *spec.obs_shape),
            spec.obs_dtype,
            "observations as the env gives them (uint8 frames unscaled)",
        )
    ]


def pack_obs(spec: ModelSpec, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
    """The network's observation batch from the inputs :func:`obs_ports` names, in its order.

    EXTENSION (Dict and Tuple observations): pack the leaves into the one flat row per step
    the network reads, as the rollout packs them (each leaf flattened and cast, in the spec's
    order); today there is one leaf, the observation itself."""
    (obs,) = leaves
    return obs


# ---------------------------------------------------------------- action masks (EXTENSION)
def env_has_mask(spec: ModelSpec) -> bool:
    """Whether the run's env gives action masks, so that the module takes ``action_mask``.

    EXTENSION (action masks): the spec's record of the env's masks, once the model spec keeps
    one; until then no run has masks (:func:`export_policy`'s ``action_mask`` adds the input
    to any Discrete policy)."""
    return bool(getattr(spec, "action_mask", False))


def mask_width(spec: ModelSpec) -> int:
    """Entries of one row of ``action_mask``.

    EXTENSION (MultiDiscrete / MultiBinary): the parts' masks concatenated (the sum of the
    parts' sizes), as the env gives them."""
    if spec.action.kind != "discrete":
        raise UserError(
            f"an action mask is for Discrete actions; this policy's are {spec.action.describe()}"
        )
    return spec.action.n


def apply_mask(spec: ModelSpec, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores`` ``(B, n)`` (logits or Q values) with the masked actions' set to
    :data:`MASKED_SCORE`: probability 0 in a softmax, never the argmax while a valid action is
    left. A row with no valid action gives action 0 (an env fault the module cannot report).

    EXTENSION (MultiDiscrete / MultiBinary): the mask per part, as the distribution splits the
    head's output."""
    return torch.where(mask, scores, torch.full_like(scores, MASKED_SCORE))


def greedy_action(spec: ModelSpec, scores: torch.Tensor) -> torch.Tensor:
    """The greedy Discrete action ``(B,)`` (int64) of logits or Q values ``(B, n)``: the first
    of equal maxima, as ``torch.argmax`` and ONNX's ArgMax both take it.

    EXTENSION (MultiDiscrete / MultiBinary, a Discrete ``start``): the argmax per part
    ``(B, parts)``; a Bernoulli's mode per bit; the action shifted as ``ActionSpace.to_env``
    shifts it."""
    return scores.argmax(-1)


# ---------------------------------------------------------------- the interface
def interface(spec: ModelSpec, mask: bool) -> tuple[list[Port], list[Port]]:
    """The exported module's inputs and outputs, in order."""
    a = spec.action
    inputs = obs_ports(spec)
    if mask:
        inputs.append(
            Port("action_mask", ("batch", mask_width(spec)), "bool", "True: the action is valid")
        )
    width = _state_width(spec)
    if width:
        layout = "h then c, concatenated" if spec.core == "lstm" else "h"
        inputs.append(
            Port(
                "state",
                ("batch", width),
                "float32",
                f"the core's state ({layout}); zeros start an episode",
            )
        )
    if spec.prev_action_reward:
        if a.kind == "discrete":
            inputs.append(
                Port("prev_action", ("batch",), "int64", "the last action; -1 at an episode start")
            )
        else:
            inputs.append(
                Port(
                    "prev_action",
                    ("batch", *a.shape),
                    "float32",
                    "the last action as the env took it; zeros at an episode start",
                )
            )
        inputs.append(
            Port("prev_reward", ("batch",), "float32", "the env's last reward; 0 at a start")
        )
    if a.kind == "discrete":
        outputs = [Port("action", ("batch",), "int64", "the greedy action")]
        name = "q_values" if spec.kind == "q" else "logits"
        masked = f"; a masked action's {MASKED_SCORE:g}" if mask else ""
        outputs.append(Port(name, ("batch", a.n), "float32", name.replace("_", " ") + masked))
    else:
        how = "squashed into the bounds by tanh" if a.squash else "clipped to the bounds"
        outputs = [
            Port("action", ("batch", *a.shape), "float32", f"the Gaussian's mean, {how}"),
            Port("mean", ("batch", *a.shape), "float32", "the Gaussian's mean"),
        ]
    if width:
        outputs.append(Port("state_out", ("batch", width), "float32", "the next step's state"))
    return inputs, outputs


def _state_width(spec: ModelSpec) -> int:
    """Floats of one env's flattened core state (0: a core without state)."""
    return int(np.prod(_core_state_shape(spec)))


def _core_state_shape(spec: ModelSpec) -> tuple[int, ...]:
    """The core's state shape for one env, ``(rows, size)`` for a recurrent core, ``(0,)``
    for the identity: asked of a core of the spec's (the core owns its layout)."""
    from asyncrl.models import CORES

    core = CORES[spec.core](1, spec.core_size)
    return tuple(core.initial_state(1).shape[1:])


class ExportedPolicy(nn.Module):
    """The greedy policy of a network as one module: inputs and outputs as :func:`interface`
    lists them (positionally, in that order). Traced for ONNX and TorchScript."""

    low: torch.Tensor  # Box actions' bounds, shaped as the action
    high: torch.Tensor
    actions: torch.Tensor  # 0..n-1: a Discrete previous action's one-hot

    def __init__(self, model: ActorCritic | QNetwork, spec: ModelSpec, mask: bool):
        super().__init__()
        self.model = model.eval()
        self.spec = spec
        self.mask = mask
        self.n_obs = len(obs_ports(spec))
        self.state_shape = _core_state_shape(spec)
        self.recurrent = _state_width(spec) > 0
        a = spec.action
        if a.kind == "box":
            shape = a.shape
            self.register_buffer("low", torch.tensor(a.low, dtype=torch.float32).reshape(shape))
            self.register_buffer("high", torch.tensor(a.high, dtype=torch.float32).reshape(shape))
        if spec.prev_action_reward and a.kind == "discrete":
            self.register_buffer("actions", torch.arange(a.n))

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spec = self.spec
        obs = pack_obs(spec, inputs[: self.n_obs])
        rest = list(inputs[self.n_obs :])
        mask = rest.pop(0) if self.mask else None
        if self.recurrent:
            flat = rest.pop(0)
            state = flat.reshape(-1, *self.state_shape)
            # zeros: no env starts here (a caller starts one with a zero state)
            first = torch.zeros_like(flat[:, 0], dtype=torch.bool)
        else:  # the identity core passes its empty state through untouched
            state = torch.zeros(0, 0)
            first = torch.zeros(0, dtype=torch.bool)
        context = self._context(rest[0], rest[1]) if spec.prev_action_reward else None
        out, state = self.model.act(obs, state, first, context)
        if spec.action.kind == "discrete":
            scores = out if mask is None else apply_mask(spec, out, mask)
            result: tuple[torch.Tensor, ...] = (greedy_action(spec, scores), scores)
        else:
            mean = out[..., : spec.action.dim].reshape(-1, *spec.action.shape)
            result = (self._to_env(mean), mean)
        if self.recurrent:
            result = (*result, state.flatten(1))
        return result

    def _to_env(self, mean: torch.Tensor) -> torch.Tensor:
        """:meth:`ActionSpace.to_env` of the mode: tanh-squashed into the bounds, or clipped
        (np.clip's order: the lower bound first)."""
        low, high = self.low, self.high
        if self.spec.action.squash:
            return low + (torch.tanh(mean) + 1.0) * 0.5 * (high - low)
        return torch.minimum(torch.maximum(mean, low), high)

    def _context(self, prev_action: torch.Tensor, prev_reward: torch.Tensor) -> torch.Tensor:
        """:func:`~asyncrl.models.write_context` in the graph: the last action one-hot (-1:
        none, all zeros) or as taken, then the learning reward (clipped and scaled as
        training's)."""
        spec = self.spec
        if spec.action.kind == "discrete":
            a = (prev_action.unsqueeze(-1) == self.actions).float()
        else:
            a = prev_action.reshape(prev_action.shape[0], -1).float()
        r = prev_reward.float()
        if spec.reward_clip:
            r = r.clamp(-spec.reward_clip, spec.reward_clip)
        r = r * spec.reward_scale
        return torch.cat([a, r.unsqueeze(-1)], dim=-1)


# ---------------------------------------------------------------- dummies and checks
def dummy_inputs(
    spec: ModelSpec, mask: bool, batch: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Random inputs for ``batch`` envs, one array per input of :func:`interface`: what the
    export traces with and checks itself on (random states, masks with a valid action in each
    row)."""
    inputs, _ = interface(spec, mask)
    out = []
    for port in inputs:
        shape = (batch, *(int(d) for d in port.shape[1:]))
        dtype = np.dtype(port.dtype)
        x: np.ndarray
        if port.name == "action_mask":
            x = rng.random(shape) < 0.7
            x[np.arange(batch), rng.integers(0, shape[1], batch)] = True
        elif port.name == "obs" and spec.encoder_class:
            x = _space_samples(spec, batch, rng)
        elif port.name == "prev_action" and dtype.kind == "i":
            x = rng.integers(-1, spec.action.n, shape)
        elif dtype == np.uint8:
            x = rng.integers(0, 256, shape)
        elif dtype.kind == "b":
            x = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            x = rng.integers(0, 3, shape)
        else:
            x = rng.standard_normal(shape)
        out.append(np.asarray(x, dtype))
    return out


def _space_samples(spec: ModelSpec, batch: int, rng: np.random.Generator) -> np.ndarray:
    """``batch`` observations drawn from the space an encoder of the user's own is built on,
    as the network takes them (packed, for a Dict or Tuple): values off the space (a Discrete
    index past n) could fail in its forward where the env's never would."""
    from asyncrl.spaces import space_from_json

    space = space_from_json(spec.obs_space)
    space.seed(int(rng.integers(2**31)))
    layout = spec.obs_layout
    rows = [
        layout.pack(o) if layout else np.asarray(o) for o in (space.sample() for _ in range(batch))
    ]
    return np.stack(rows).astype(spec.obs_dtype)


def _check(
    name: str, got: Sequence[np.ndarray], want: Sequence[torch.Tensor], outputs: list[Port]
) -> None:
    """The exported module's outputs against the wrapper's on the same inputs: a mismatch is
    asyncrl's bug (or the exporter's), not the user's, so it is no UserError."""
    for port, g, w in zip(outputs, got, want, strict=True):
        ref = w.numpy()
        if g.shape != ref.shape or g.dtype != ref.dtype:
            raise RuntimeError(
                f"the {name} export's {port.name} is {g.dtype}{list(g.shape)}, the policy's "
                f"{ref.dtype}{list(ref.shape)}: the export is wrong (please report it)"
            )
        if ref.dtype.kind == "f" and not np.allclose(g, ref, rtol=1e-4, atol=1e-4):
            worst = float(np.abs(g - ref).max())
            raise RuntimeError(
                f"the {name} export's {port.name} differs from the policy's by up to {worst:.3g}:"
                " the export is wrong (please report it)"
            )


# ---------------------------------------------------------------- exporting
def check_out(out: str | Path, force: bool) -> Path:
    """The output file, refused where it exists (unless ``force``) or its folder does not:
    checked before anything is loaded."""
    path = Path(out)
    if path.is_dir():
        raise UserError(f"--out: {path} is a directory; name the file to write")
    if path.exists() and not force:
        raise UserError(
            f"--out: {path} already exists; choose another file or replace it with --force "
            "(nothing was written)"
        )
    if not path.parent.is_dir():
        raise UserError(f"--out: the folder {path.parent} does not exist; create it first")
    return path


def require_onnx() -> None:
    """One line naming the extra where onnx or onnxruntime is missing: an ONNX export writes
    with the first and checks itself with the second."""
    for module in ("onnx", "onnxruntime"):
        try:
            __import__(module)
        except ImportError:
            raise UserError(
                f"--format onnx needs the {module} package, which is not installed: {INSTALL_HINT}"
            ) from None


def export_policy(
    run_dir: str | Path,
    out: str | Path,
    format: Format = "onnx",
    which: Which | None = None,
    force: bool = False,
    action_mask: bool | None = None,
) -> Exported:
    """Write the saved policy of ``run_dir`` (``which``: ``best``, ``last``, or by default the
    best where the run has one, as :func:`asyncrl.load`) to ``out`` as an ONNX or TorchScript
    module of the interface docs/export.md describes. ``out`` is written
    atomically once the module has been checked against the policy on a random batch; an
    existing file is replaced only with ``force``. ``action_mask``: add the ``action_mask``
    input (Discrete actions; default: where the run's env has masks)."""
    if format not in FORMATS:
        raise UserError(f"--format: choose onnx or torchscript, got {format!r}")
    path = check_out(out, force)
    if format == "onnx":
        require_onnx()
    policy = load(run_dir, which)
    spec = dataclasses.replace(policy.spec, precision="float32")  # the float32 maths
    mask = env_has_mask(spec) if action_mask is None else action_mask
    if mask:
        mask_width(spec)  # refuses a mask for Box actions
    model = build_model(spec)
    model.load_state_dict(policy.model.state_dict())
    module = ExportedPolicy(model, spec, mask).eval()
    inputs, outputs = interface(spec, mask)
    rng = np.random.default_rng(0)
    example = [torch.from_numpy(x) for x in dummy_inputs(spec, mask, 2, rng)]
    # checked on another batch size than the one traced: the batch axis must be free
    check = dummy_inputs(spec, mask, 3, rng)
    with torch.no_grad():
        want = module(*(torch.from_numpy(x) for x in check))
    meta = json.dumps(_metadata(policy, spec, mask, format, inputs, outputs))
    try:
        if format == "onnx":
            data = _onnx_bytes(module, example, inputs, outputs, meta)
            got = _run_onnx(data, inputs, check)
        else:
            data = _torchscript_bytes(module, example, meta)
            got = _run_torchscript(data, check)
        _check(format, got, want, outputs)
    except Exception as e:
        if not spec.encoder_class:
            raise
        # an encoder of the user's own is traced as it is written: one that tracing cannot
        # follow (Python control flow on its values, a NumPy round trip) is the user's to fix
        first = next(iter(str(e).splitlines()), "")
        raise UserError(
            f"--format {format}: the encoder {spec.encoder_class} does not export "
            f"({type(e).__name__}: {first}); tracing records one pass of tensor operations, so "
            "its forward may not branch on values or leave torch "
            "(docs/spaces.md#your-own-encoder)"
        ) from None
    write_atomically(path, lambda f: f.write(data))
    return Exported(path, format, inputs, outputs, describe(policy))


def _metadata(
    policy: Policy,
    spec: ModelSpec,
    mask: bool,
    format: Format,
    inputs: list[Port],
    outputs: list[Port],
) -> dict[str, Any]:
    """What the file says about itself (docs/export.md): its interface, the action space, and
    the run it came from."""
    a = spec.action
    return {
        "format": format,
        "inputs": [p.to_dict() for p in inputs],
        "outputs": [p.to_dict() for p in outputs],
        "action_space": {
            "kind": a.kind,
            "n": a.n,
            "shape": list(a.shape),
            "low": list(a.low),
            "high": list(a.high),
            "squash": a.squash,
        },
        "core": spec.core,
        "action_mask": mask,
        "env": policy.env_id,
        "algo": policy.algo,
        "model": describe(policy),
    }


def _onnx_bytes(
    module: ExportedPolicy,
    example: list[torch.Tensor],
    inputs: list[Port],
    outputs: list[Port],
    meta: str,
) -> bytes:
    """The module as an ONNX model, by the TorchScript-based exporter (``dynamo=False``).

    Why that one, rather than the torch.export-based default of PyTorch 2.9 and later: it
    writes these small graphs (conv, linear, LSTM and GRU cells) as plain ONNX operators with a
    dynamic batch axis, needs no package beyond ``onnx`` (the other needs onnxscript and its
    own dependencies), runs in a fraction of the other's time, and was the default of every
    PyTorch before 2.9 (an older one, without the ``dynamo`` argument, gets none). PyTorch
    marks it deprecated: its warning is silenced here, and this function is the one place to
    change should a later PyTorch drop it (docs/export.md#the-exporter)."""
    import onnx

    names = [p.name for p in inputs]
    out_names = [p.name for p in outputs]
    axes = {p.name: {0: "batch"} for p in inputs + outputs}
    legacy: dict[str, Any] = (
        {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    )
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the deprecation, and the tracer's notes on shapes
        torch.onnx.export(
            module,
            tuple(example),
            buf,  # type: ignore[arg-type]  # a file object is taken too (torch.onnx's docs)
            input_names=names,
            output_names=out_names,
            dynamic_axes=axes,
            opset_version=OPSET,
            do_constant_folding=True,
            **legacy,
        )
    proto = onnx.load_from_string(buf.getvalue())
    proto.producer_name = "asyncrl"
    proto.doc_string = "asyncrl export: a greedy policy (docs/export.md)"
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, meta
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def _run_onnx(data: bytes, inputs: list[Port], feeds: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {p.name: x for p, x in zip(inputs, feeds, strict=True)})


def _torchscript_bytes(module: ExportedPolicy, example: list[torch.Tensor], meta: str) -> bytes:
    """The module traced to TorchScript (``torch.jit.trace``): loaded by ``torch.jit.load``
    alone, no asyncrl; the interface's JSON rides along as the extra file ``asyncrl``."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes; torch.jit's deprecation
        traced = torch.jit.trace(module, tuple(example), check_trace=False)
        buf = io.BytesIO()
        torch.jit.save(traced, buf, _extra_files={METADATA_KEY: meta})
    return buf.getvalue()


def _run_torchscript(data: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        loaded = torch.jit.load(io.BytesIO(data))
        return [t.numpy() for t in loaded(*(torch.from_numpy(x) for x in feeds))]
