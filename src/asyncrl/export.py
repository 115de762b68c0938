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

* inputs: ``obs`` (the observation space's dtype), or for a structured observation (a Dict,
  a Tuple, nested too) one input per leaf (:func:`obs_ports`: ``obs.KEY``, ``obs.a.0``,
  ``obs.0``), each in its leaf's dtype and shape, packed inside the module into the row the
  network learnt from; ``action_mask`` (bool ``(B, mask_dim)``, where the run's env has
  masks: Discrete and MultiDiscrete actions, the parts' masks concatenated); ``state``
  ``(B, rows * core_size)`` for a recurrent core (the LSTM's h then c, concatenated; zeros
  start an episode); ``prev_action`` and ``prev_reward`` for a core that takes them
  (``--prev-action-reward``).
* outputs: ``action`` (as the env takes it, :meth:`ActionSpace.to_env`: a Discrete or
  MultiDiscrete action with its start, in the space's shape; MultiBinary bits as int8);
  then ``logits`` ``(B, dim)`` (an actor-critic's: Discrete's, MultiDiscrete's parts
  concatenated, a logit per MultiBinary bit), ``q_values`` (the Q methods) or ``mean`` (the
  Gaussian's, before clipping or squashing); then ``state_out`` for a recurrent core.

What each action space adds is in a function here: :func:`env_has_mask`, :func:`mask_width`
and :func:`apply_mask` (the mask), :func:`greedy_action` (the greedy action as the env takes
it), :func:`no_action` (the previous action at an episode's start).
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
from asyncrl.spaces import ObsLeaf

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


# ---------------------------------------------------------------- observations
def obs_input_name(leaf: ObsLeaf) -> str:
    """The input of a structured observation's leaf: ``obs.`` and its key path (``obs.image``,
    ``obs.extra.0``; a Tuple's ``obs.0``), or ``obs`` for a whole observation that is one leaf
    (a top-level Discrete, MultiDiscrete or MultiBinary)."""
    return f"obs.{leaf.name}" if leaf.name else "obs"


def obs_ports(spec: ModelSpec) -> list[Port]:
    """The observation's inputs, in the order the module takes them: ``obs`` for a Box; for a
    structured observation (:mod:`asyncrl.spaces`) one per leaf, in the layout's order (the
    space's: a Dict's keys as Gymnasium orders them), each in its leaf's own shape and dtype
    as the env gives it (Discrete values with their ``start``). The ``action_mask`` key of a
    Dict observation is no leaf (the layout leaves it out): it is the ``action_mask`` input."""
    if not spec.obs_leaves:
        return [
            Port(
                "obs",
                ("batch", *spec.obs_shape),
                spec.obs_dtype,
                "observations as the env gives them (uint8 frames unscaled)",
            )
        ]
    ports = [
        Port(
            obs_input_name(leaf),
            ("batch", *leaf.shape),
            leaf.dtype,
            f"the observation's {leaf.describe()} ({leaf.kind}) as the env gives it",
        )
        for leaf in spec.obs_leaves
    ]
    seen: dict[str, ObsLeaf] = {}
    for port, leaf in zip(ports, spec.obs_leaves, strict=True):
        if port.name in seen:  # keys holding a "." ({"a.b": ..., "a": {"b": ...}})
            raise UserError(
                f"the observation's leaves {list(seen[port.name].path)} and {list(leaf.path)} "
                f"would both be the input {port.name}; rename a key of the env's observation "
                "(a wrapper) to export this policy"
            )
        seen[port.name] = leaf
    return ports


def pack_obs(spec: ModelSpec, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
    """The network's observation batch from the inputs :func:`obs_ports` names, in its order:
    a Box's as it comes; a structured observation's leaves packed into the one flat row per
    env the network reads, as :meth:`asyncrl.spaces.ObsLayout.pack` packs them for the
    rollout (each leaf less its ``start`` where it has one, flattened, cast to the row's
    dtype, in the layout's order), so that the module's
    :class:`~asyncrl.models.MultiInputEncoder` reads each leaf back as it learnt to."""
    layout = spec.obs_layout
    if layout is None:
        (obs,) = leaves
        return obs
    dtype = getattr(torch, layout.dtype)
    parts = []
    for leaf, x in zip(layout.leaves, leaves, strict=True):
        if leaf.start and any(leaf.start):
            # int64, as NumPy's subtraction of the Python ints gives it, whatever the leaf's
            # integer dtype; the stored values are from 0 and fit the row's dtype
            start = torch.tensor(leaf.start, dtype=torch.int64).reshape(leaf.shape)
            x = x.long() - start
        parts.append(x.reshape(x.shape[0], leaf.size).to(dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


# ---------------------------------------------------------------- actions and their masks
#: the action kinds an env may mask (asyncrl.actionmask.check_probed_mask): one mask entry per
#: logit of a categorical
MASKABLE = ("discrete", "multi_discrete")


def env_has_mask(spec: ModelSpec) -> bool:
    """Whether the run's env gives action masks (:attr:`ActionSpace.masked`, found when the
    run probed its env), so that the module takes ``action_mask``."""
    return spec.action.masked


def mask_width(spec: ModelSpec) -> int:
    """Entries of one row of ``action_mask``: one per logit, Discrete's ``n`` or the sum of a
    MultiDiscrete space's parts (each part's after the parts before it), as the env gives
    them (``info["action_mask"]``, :mod:`asyncrl.actionmask`). Refused for the other kinds,
    which no env masks."""
    a = spec.action
    if a.kind not in MASKABLE:
        raise UserError(
            f"an action mask is for Discrete and MultiDiscrete actions; this policy's are "
            f"{a.describe()}: export it without action_mask"
        )
    return a.dim


def apply_mask(spec: ModelSpec, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores`` ``(B, dim)`` (logits or Q values) with the masked actions' set to
    :data:`MASKED_SCORE`: probability 0 in a softmax, never the argmax while a valid action is
    left. MultiDiscrete's mask is its parts' concatenated as its logits are, so one
    elementwise ``where`` masks each part's actions (as ``MultiCategorical`` splits both). A
    row (a part) with no valid action gives its first action (an env fault the module cannot
    report; the runner refuses such a row)."""
    return torch.where(mask, scores, torch.full_like(scores, MASKED_SCORE))


def greedy_action(spec: ModelSpec, scores: torch.Tensor) -> torch.Tensor:
    """The greedy action of logits or Q values ``scores`` ``(B, dim)``, as ``Policy.act``
    gives it (the distribution's mode, then :meth:`ActionSpace.to_env`): Discrete's argmax
    ``(B,)`` (int64); MultiDiscrete's argmax per part, in the space's shape ``(B, *shape)``
    (int64); both with the space's ``start`` added. Of equal maxima the first, as
    ``torch.argmax`` and ONNX's ArgMax both take it. MultiBinary: each bit 1 where its logit
    is above 0 (the Bernoulli's mode), as int8 in the space's shape."""
    a = spec.action
    if a.kind == "discrete":
        action = scores.argmax(-1)
        return action + a.start[0] if a.start else action
    if a.kind == "multi_discrete":
        parts = scores.split(list(a.nvec), dim=-1)
        action = torch.stack([p.argmax(-1) for p in parts], dim=-1)
        if a.start:
            action = action + torch.tensor(a.start, dtype=torch.int64)
        return action.reshape(-1, *a.shape)
    if a.kind == "multi_binary":
        return (scores > 0).to(torch.int8).reshape(-1, *a.shape)
    raise ValueError(f"{a.describe()} actions have no greedy action of logits")


def no_action(spec: ModelSpec) -> np.ndarray:
    """The ``prev_action`` that says "no action yet" (an episode's first step) for one env, in
    the action's shape as the env takes it: one below the space's start (each part's, for
    MultiDiscrete), whose one-hot is all zeros as training's context is there (-1 for a space
    from 0); zeros for MultiBinary and Box actions, which the context takes as they are."""
    a = spec.action
    if a.kind == "discrete":
        return np.asarray((a.start[0] if a.start else 0) - 1, np.int64)
    if a.kind == "multi_discrete":
        start = np.asarray(a.start or (0,) * len(a.nvec), np.int64)
        return (start - 1).reshape(a.shape)
    return np.zeros(a.shape, np.int8 if a.kind == "multi_binary" else np.float32)


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
        none = no_action(spec)
        if a.kind == "discrete":
            start = f"{int(none)}"
        elif a.kind == "multi_discrete":
            start = f"{none.reshape(-1).tolist()} (one below each part's start)"
        else:
            start = "zeros"
        inputs.append(
            Port(
                "prev_action",
                ("batch", *none.shape),
                none.dtype.name,
                f"the last action as the env took it; {start} at an episode start",
            )
        )
        inputs.append(
            Port("prev_reward", ("batch",), "float32", "the env's last reward; 0 at a start")
        )
    if a.kind != "box":
        shift = " with the space's start" if a.start else ""
        action = {
            "discrete": Port("action", ("batch",), "int64", f"the greedy action{shift}"),
            "multi_discrete": Port(
                "action",
                ("batch", *a.shape),
                "int64",
                f"each part's greedy action{shift}, in the space's shape",
            ),
            "multi_binary": Port(
                "action", ("batch", *a.shape), "int8", "each bit 1 where its logit is above 0"
            ),
        }[a.kind]
        name = "q_values" if spec.kind == "q" else "logits"
        masked = f"; a masked action's {MASKED_SCORE:g}" if mask else ""
        outputs = [
            action,
            Port(name, ("batch", a.dim), "float32", name.replace("_", " ") + masked),
        ]
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
    actions: torch.Tensor  # each logit's action as the env takes it: the previous one's one-hot
    part_of: torch.Tensor  # each logit's part (MultiDiscrete)

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
        if spec.prev_action_reward and a.kind in MASKABLE:
            # write_context's one-hot (per part) of the action less its start: here the
            # action as taken is compared with each logit's, start included, so that a
            # prev_action below the start (no_action) one-hots to zeros
            start = np.asarray(a.start or (0,) * len(a.parts), np.int64)
            part = np.repeat(np.arange(len(a.parts)), a.parts)
            index = np.concatenate([np.arange(k) for k in a.parts]) + start[part]
            self.register_buffer("actions", torch.from_numpy(index))
            self.register_buffer("part_of", torch.from_numpy(part))

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
        if spec.action.kind != "box":
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
        """:func:`~asyncrl.models.write_context` in the graph: the last action one-hot (per
        part for MultiDiscrete; :func:`no_action`: none, all zeros) or as taken (MultiBinary's
        bits, Box's), then the learning reward (clipped and scaled as training's)."""
        spec = self.spec
        if spec.action.kind == "discrete":
            a = (prev_action.unsqueeze(-1) == self.actions).float()
        elif spec.action.kind == "multi_discrete":
            taken = prev_action.reshape(prev_action.shape[0], -1)[:, self.part_of]
            a = (taken == self.actions).float()
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
    leaves = {obs_input_name(leaf): leaf for leaf in spec.obs_leaves}
    out = []
    for port in inputs:
        shape = (batch, *(int(d) for d in port.shape[1:]))
        dtype = np.dtype(port.dtype)
        x: np.ndarray
        leaf = leaves.get(port.name)
        if leaf is not None and leaf.kind in ("discrete", "multidiscrete"):
            # values of the space (the one-hot of any other is no network's input)
            low = np.asarray(leaf.start).reshape(leaf.shape)
            x = low + rng.integers(0, np.asarray(leaf.nvec).reshape(leaf.shape), shape)
        elif leaf is not None and leaf.kind == "multibinary":
            x = rng.integers(0, 2, shape)
        elif port.name == "action_mask":
            x = rng.random(shape) < 0.7
            offset = 0
            for k in spec.action.parts:  # a valid action in each part
                x[np.arange(batch), offset + rng.integers(0, k, batch)] = True
                offset += k
        elif port.name == "prev_action" and spec.action.kind in MASKABLE:
            # the actions as taken, and no_action's (one below the start) in some rows
            low = no_action(spec)
            high = low + 1 + np.asarray(spec.action.parts).reshape(low.shape)
            x = rng.integers(low, high, shape)
        elif port.name == "prev_action" and dtype == np.int8:  # MultiBinary bits
            x = rng.integers(0, 2, shape)
        elif port.name == "obs" and spec.encoder_class:
            x = _space_samples(spec, batch, rng)
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
    existing file is replaced only with ``force``. ``action_mask``: the module takes an
    ``action_mask`` input where the run's env gives masks (None, the default, or True);
    True adds it to the policy of an env without them too (Discrete and MultiDiscrete
    actions), and False is refused for a run whose env has masks: its policy acts on them."""
    if format not in FORMATS:
        raise UserError(f"--format: choose onnx or torchscript, got {format!r}")
    path = check_out(out, force)
    if format == "onnx":
        require_onnx()
    policy = load(run_dir, which)
    spec = dataclasses.replace(policy.spec, precision="float32")  # the float32 maths
    if action_mask is False and env_has_mask(spec):
        raise UserError(
            "action_mask=False: this run's env gives action masks, and its exported policy "
            "takes them; leave action_mask out (an all-True mask makes every action valid)"
        )
    mask = env_has_mask(spec) or bool(action_mask)
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
            "nvec": list(a.nvec),
            "start": list(a.start),
            "masked": a.masked,
        },
        # a structured observation's leaves: the input of each and its key path in the
        # observation (Dict keys, Tuple indices), so that a runner finds the leaves of a
        # dict or tuple without parsing the names (a key may hold a ".")
        "obs_leaves": [
            {"input": obs_input_name(leaf), "path": list(leaf.path), "kind": leaf.kind}
            for leaf in spec.obs_leaves
        ],
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
