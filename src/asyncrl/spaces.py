"""Observation spaces: what asyncrl reads of an env's observations, and how it stores them.

A ``Box`` observation is stored as the env gives it (its shape, its dtype). Any other space --
a ``Dict`` or ``Tuple`` (nested too), or a ``Discrete``, ``MultiDiscrete`` or ``MultiBinary``
observation -- is described by an :class:`ObsLayout`: its *leaves*, each with a name (the key
path: ``image``, ``direction``; ``0``, ``1`` in a ``Tuple``; joined with ``.`` when nested, as
``a.0``), a shape, a dtype and a kind that says how the network encodes it:

=================  ==========================================================================
kind               the leaf, and what the encoder makes of it
=================  ==========================================================================
``image``          a ``Box`` of rank 3 (or a ``uint8`` one of rank 2, one channel) that one of
                   the conv nets can read: the conv encoder, on the leaf's own shape
``vector``         any other ``Box``: an MLP, after the shared observation normaliser where
                   ``--normalize-obs`` is on (the only leaves it normalises)
``discrete``       ``Discrete(n)``: one-hot, into the same MLP
``multidiscrete``  ``MultiDiscrete(nvec)``: one one-hot per part, into the same MLP
``multibinary``    ``MultiBinary``: its bits as floats, into the same MLP
=================  ==========================================================================

**The storage format is one flat row an env step.** As RLlib's ModelV2 does (its flattening
preprocessor, then ``restore_original_dimensions`` in the model), each observation is packed
into one row (:meth:`ObsLayout.pack`) by a per-env wrapper applied before vectorization
(:class:`PackObservation`), so the rollout buffer, every backend's messages, the checkpoints
and evaluation carry a plain array, as they do for a ``Box``. The row's dtype is ``uint8``
where every leaf fits in it exactly (MiniGrid's image and its ``Discrete(4)`` direction), else
``float32``. Discrete values are stored less their ``start`` (from 0).

**The encoder sees each leaf's structure.** The network unpacks each leaf from the row into its
own shape (a view and a reshape, no copy: :class:`asyncrl.models.MultiInputEncoder`): an image
leaf reaches the conv encoder as an image, never flattened (unless ``--net mlp`` asks for an
MLP on every leaf). The layout travels in the model's
spec (:attr:`asyncrl.models.ModelSpec.obs_leaves`), so a checkpoint rebuilds both the network
and the packing, and :meth:`asyncrl.Policy.act` packs a ``Dict`` or ``Tuple`` observation with
it.

A leaf of another space (``Text``, ``Graph``, ``Sequence``, a space of the env's own such as
MiniGrid's ``MissionSpace``) is refused with one line that names its key and the fix: leave
it out with ``--obs-keys``, or wrap the env. An ``action_mask`` key of a ``Dict`` is the
action mask, never an observation leaf.

Imports no PyTorch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from asyncrl.errors import UserError

LeafKind = Literal["image", "vector", "discrete", "multidiscrete", "multibinary"]

#: the key of a Dict observation that is the action mask (PettingZoo's classic games): never a
#: leaf of the observation
ACTION_MASK_KEY = "action_mask"

# (channels, kernel, stride) of the conv layers, then the width of the fully connected layer:
# the conv encoders' geometry (asyncrl.models.encoders builds them), here so that the layout,
# which imports no PyTorch, can tell which images they read
CONV_NETS: dict[str, tuple[list[tuple[int, int, int]], int]] = {
    "a3c": ([(16, 8, 4), (32, 4, 2)], 256),  # Mnih et al., 2016, Section 8
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),  # Mnih et al., 2015
    "minatar": ([(16, 3, 1)], 128),  # Young & Tian, 2019
}


def image_channels_last(shape: tuple[int, ...]) -> bool:
    """Whether an image of ``shape`` is stored (H, W, C): MinAtar gives (10, 10, C) and Atari
    frame stacks (4, 84, 84), so the channels are the short axis."""
    return len(shape) == 3 and shape[-1] < shape[0]


def auto_conv_net(shape: tuple[int, ...], channels_last: bool) -> Literal["minatar", "a3c"]:
    """The conv net ``--net auto`` picks for images of ``shape``: MinAtar's for small ones, the
    A3C paper's for Atari-sized ones."""
    spatial = shape[:2] if channels_last else shape[1:]
    return "minatar" if min(spatial) < 36 else "a3c"


def conv_net_problem(name: str, obs_shape: tuple[int, ...], channels_last: bool) -> str | None:
    """Why the conv net ``name`` cannot read these observations, or None where it can."""
    if len(obs_shape) != 3:
        return f"a conv net reads images, and these observations have shape {obs_shape}"
    h, w = obs_shape[:2] if channels_last else obs_shape[1:]
    for _, k, s in CONV_NETS[name][0]:
        if min(h, w) < k:
            return (
                f"its layers need larger images than {obs_shape} (a {k}x{k} kernel meets a "
                f"{h}x{w} map)"
            )
        h, w = (h - k) // s + 1, (w - k) // s + 1
    return None


@dataclass(frozen=True)
class ObsLeaf:
    """One leaf of a structured observation, and where it lies in the packed row."""

    #: the key path joined with "." (``image``, ``a.0``); "" for a whole observation that is one
    #: leaf (a top-level Discrete, MultiDiscrete or MultiBinary)
    name: str
    #: the key path: Dict keys (str) and Tuple indices (int), outermost first
    path: tuple[str | int, ...]
    kind: LeafKind
    #: the leaf's own shape in the space (``()`` for a Discrete)
    shape: tuple[int, ...]
    #: the space's dtype (numpy name): uint8 images are divided by 255 in the network
    dtype: str
    #: the leaf's first column in the packed row
    offset: int
    #: Discrete: ``(n,)``; MultiDiscrete: its nvec, flattened: the one-hot widths
    nvec: tuple[int, ...] = ()
    #: Discrete, MultiDiscrete: the start of each part, flattened (stored values are less it)
    start: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        """Columns of the packed row the leaf takes."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def features(self) -> int:
        """The leaf's width as the MLP reads it: the one-hot widths summed, else its size."""
        return int(sum(self.nvec)) if self.kind in ("discrete", "multidiscrete") else self.size

    @property
    def channels_last(self) -> bool:
        """An image leaf stored (H, W, C) rather than (C, H, W)."""
        return self.kind == "image" and image_channels_last(self.shape)

    @property
    def image_shape(self) -> tuple[int, ...]:
        """The shape the conv encoder reads: the leaf's, a rank-2 one as one channel."""
        return (1, *self.shape) if len(self.shape) == 2 else self.shape

    def describe(self) -> str:
        return self.name or "the observation"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObsLeaf:
        return cls(
            name=str(d["name"]),
            path=tuple(d["path"]),
            kind=d["kind"],
            shape=tuple(int(x) for x in d["shape"]),
            dtype=str(d["dtype"]),
            offset=int(d["offset"]),
            nvec=tuple(int(x) for x in d.get("nvec", ())),
            start=tuple(int(x) for x in d.get("start", ())),
        )


@dataclass(frozen=True)
class ObsLayout:
    """The leaves of a structured observation packed into one row of ``size`` columns of
    ``dtype`` (``uint8`` or ``float32``), in the space's order."""

    leaves: tuple[ObsLeaf, ...]
    dtype: str

    @property
    def size(self) -> int:
        return sum(leaf.size for leaf in self.leaves)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(leaf.name for leaf in self.leaves)

    def space(self) -> gym.spaces.Box:
        """The packed row's space (what :class:`PackObservation` declares)."""
        if self.dtype == "uint8":
            return gym.spaces.Box(0, 255, (self.size,), np.uint8)
        return gym.spaces.Box(-np.inf, np.inf, (self.size,), np.float32)

    def pack(self, obs: Any) -> np.ndarray:
        """One observation as its row ``(size,)``, or a batch (each leaf with a leading batch
        axis: a dict of arrays) as rows ``(N, size)``. ValueError, naming the leaf, where
        ``obs`` does not fit the layout."""
        values, batch = [], None
        for leaf in self.leaves:
            v = np.asarray(_lookup(obs, leaf))
            lead = v.shape[: v.ndim - len(leaf.shape)]
            if v.ndim < len(leaf.shape) or v.shape[len(lead) :] != leaf.shape or len(lead) > 1:
                raise ValueError(
                    f"{leaf.describe()} has shape {v.shape}; the space's is {leaf.shape} "
                    f"(or (N, *{leaf.shape}) for a batch)"
                )
            if batch is None:
                batch = lead
            elif lead != batch:
                raise ValueError(
                    f"{leaf.describe()} has a batch of {lead or 'one'}, the leaf before it "
                    f"{batch or 'one'}: give every leaf the same leading axis"
                )
            values.append(v)
        assert batch is not None  # a layout has at least one leaf
        out = np.empty((*batch, self.size), self.dtype)
        for leaf, v in zip(self.leaves, values, strict=True):
            if leaf.start and any(leaf.start):
                v = v - np.asarray(leaf.start).reshape(leaf.shape)
            out[..., leaf.offset : leaf.offset + leaf.size] = v.reshape((*batch, leaf.size))
        return out

    def leaf_values(self, rows: np.ndarray, leaf: ObsLeaf) -> np.ndarray:
        """``leaf``'s values in rows ``(..., size)`` as ``(..., *leaf.shape)`` in the packed
        dtype, stored values (Discrete ones from 0): a view."""
        part = rows[..., leaf.offset : leaf.offset + leaf.size]
        return part.reshape((*rows.shape[:-1], *leaf.shape))

    def unpack(self, rows: np.ndarray) -> Any:
        """The observation (or batch) that :meth:`pack` made ``rows`` from: dicts and tuples
        as in the space (only the leaves kept), each leaf in the space's dtype (a view where
        that is the packed dtype and no start is added back)."""
        rows = np.asarray(rows)
        values = []
        for leaf in self.leaves:
            v = self.leaf_values(rows, leaf)
            if leaf.start and any(leaf.start):  # (an array, where a 0-d sum gives a scalar)
                v = np.asarray(v.astype(np.int64) + np.asarray(leaf.start).reshape(leaf.shape))
            if v.dtype != np.dtype(leaf.dtype):
                v = v.astype(leaf.dtype)
            values.append((leaf, v))
        return nest(values)


def nest(values: Iterable[tuple[ObsLeaf, Any]]) -> Any:
    """The leaves' ``values`` (arrays or tensors) in the space's structure: dicts by key,
    tuples by index; a single leaf with no path (a Discrete observation, say) is the value."""
    tree: dict[Any, Any] = {}
    for leaf, v in values:
        if not leaf.path:
            return v
        node = tree
        for key in leaf.path[:-1]:
            node = node.setdefault(key, {})
        node[leaf.path[-1]] = v
    return _as_tuples(tree)


def _lookup(obs: Any, leaf: ObsLeaf) -> Any:
    """``leaf``'s value in the observation ``obs`` (every env step: the message is made only
    for a misfit)."""
    node = obs
    for depth, key in enumerate(leaf.path):
        if isinstance(key, int):
            fits = isinstance(node, Sequence) and not isinstance(node, str | bytes)
            if not fits:
                raise ValueError(
                    f"{_where(leaf, depth)} should be a tuple (for {leaf.name}), got a "
                    f"{type(node).__name__}"
                )
            if key >= len(node):
                raise ValueError(
                    f"{_where(leaf, depth)} has {len(node)} entries; {leaf.name} needs {key + 1}"
                )
        elif not isinstance(node, Mapping) or key not in node:
            what = (
                f"has no key {key!r} (keys: {', '.join(map(str, node))})"
                if isinstance(node, Mapping)
                else f"should be a dict (for {leaf.name}), got a {type(node).__name__}"
            )
            raise ValueError(f"{_where(leaf, depth)} {what}")
        node = node[key]
    return node


def _where(leaf: ObsLeaf, depth: int) -> str:
    return ".".join(str(k) for k in leaf.path[:depth]) or "the observation"


def _as_tuples(tree: dict[Any, Any]) -> Any:
    """Nested dicts with the Tuple levels (int keys) made tuples again."""
    out = {k: _as_tuples(v) if isinstance(v, dict) else v for k, v in tree.items()}
    if out and all(isinstance(k, int) for k in out):
        return tuple(out[i] for i in range(len(out)))
    return out


def _fits_uint8(space: gym.Space) -> bool:
    """Whether every value of the leaf's space is a uint8 exactly (Discrete ones less their
    start)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n) <= 256
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.max(space.nvec)) <= 256
    if isinstance(space, gym.spaces.MultiBinary):
        return True
    assert isinstance(space, gym.spaces.Box)
    dtype = np.dtype(space.dtype)
    if dtype in (np.uint8, np.bool_):
        return True
    return (
        np.issubdtype(dtype, np.integer)
        and bool(np.all(space.low >= 0))
        and bool(np.all(space.high <= 255))
    )


def _is_image(space: gym.spaces.Box) -> bool:
    """A Box that a conv net reads: rank 3 (as a single Box observation is), or a uint8 one of
    rank 2 (a grey picture, one channel), that one of the conv nets can take (else the MLP)."""
    shape = tuple(space.shape)
    if len(shape) == 2 and np.dtype(space.dtype) == np.uint8:
        shape = (1, *shape)
    if len(shape) != 3:
        return False
    last = image_channels_last(shape)
    return conv_net_problem(auto_conv_net(shape, last), shape, last) is None


def _leaf_kind(space: gym.Space) -> LeafKind | None:
    if isinstance(space, gym.spaces.Box) and space.shape is not None:
        return "image" if _is_image(space) else "vector"
    for cls, kind in (
        (gym.spaces.Discrete, "discrete"),
        (gym.spaces.MultiDiscrete, "multidiscrete"),
        (gym.spaces.MultiBinary, "multibinary"),
    ):
        if isinstance(space, cls):
            return kind  # type: ignore[return-value]
    return None


def _walk(
    space: gym.Space, path: tuple[str | int, ...]
) -> list[tuple[tuple[str | int, ...], gym.Space]]:
    """The leaves under ``space`` in the space's order (Dict keys as the Dict orders them), an
    ``action_mask`` key of a Dict left out."""
    if isinstance(space, gym.spaces.Dict):
        out = []
        for key, sub in space.spaces.items():
            if key != ACTION_MASK_KEY:
                out += _walk(sub, (*path, key))
        return out
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _walk(sub, (*path, i))]
    return [(path, space)]


def _name(path: tuple[str | int, ...]) -> str:
    return ".".join(str(k) for k in path)


def obs_layout(
    space: gym.Space, obs_keys: Sequence[str] = (), env_id: str = "the env"
) -> ObsLayout | None:
    """The layout of ``space``'s leaves (``obs_keys``: the top-level keys of a Dict to keep,
    all by default), or None for a Box, which is stored as it is. A leaf asyncrl cannot encode,
    or an ``obs_keys`` that does not fit the space, raises :class:`UserError` with one line
    naming the key and the fix."""
    keys = tuple(obs_keys)
    if isinstance(space, gym.spaces.Box):
        if keys:
            raise UserError(
                f"--obs-keys: {env_id} has Box observations, not a Dict: drop --obs-keys"
            )
        return None
    if keys:
        if not isinstance(space, gym.spaces.Dict):
            raise UserError(
                f"--obs-keys: {env_id} has {type(space).__name__} observations; --obs-keys "
                "selects keys of a Dict observation: drop it"
            )
        known = [k for k in space.spaces if k != ACTION_MASK_KEY]
        for key in keys:
            if key not in known:
                raise UserError(
                    f"--obs-keys: {env_id}'s observations have no key {key!r}; its keys are "
                    f"{', '.join(map(str, known))}"
                )
        space = gym.spaces.Dict({k: s for k, s in space.spaces.items() if k in keys})
    found = _walk(space, ())
    if not found:
        raise UserError(
            f"--env: {env_id}'s observations have no leaf to read (an empty Dict or Tuple); "
            "wrap the env to give it one"
        )
    for path, sub in found:
        if _leaf_kind(sub) is None:
            raise UserError(_refusal(space, path, sub, env_id))
    leaves, offset = [], 0
    for path, sub in found:
        kind = _leaf_kind(sub)
        assert kind is not None
        nvec: tuple[int, ...] = ()
        start: tuple[int, ...] = ()
        if isinstance(sub, gym.spaces.Discrete):
            nvec, start = (int(sub.n),), (int(sub.start),)
        elif isinstance(sub, gym.spaces.MultiDiscrete):
            nvec = tuple(int(x) for x in np.ravel(sub.nvec))
            start = tuple(int(x) for x in np.ravel(sub.start))
        leaf = ObsLeaf(
            name=_name(path),
            path=path,
            kind=kind,
            shape=tuple(int(x) for x in (sub.shape or ())),
            dtype=np.dtype(sub.dtype).name if sub.dtype is not None else "int64",
            offset=offset,
            nvec=nvec,
            start=start,
        )
        leaves.append(leaf)
        offset += leaf.size
    dtype = "uint8" if all(_fits_uint8(sub) for _, sub in found) else "float32"
    return ObsLayout(tuple(leaves), dtype)


def _refusal(space: gym.Space, path: tuple[str | int, ...], sub: gym.Space, env_id: str) -> str:
    """The one line that refuses a leaf, naming its key and the fix."""
    what = f"a {type(sub).__name__} space, which asyncrl cannot encode"
    wrap = "wrap the env to turn it into a Box, Discrete, MultiDiscrete or MultiBinary"
    if not path:
        return (
            f"--env: {env_id}'s observations are {what}; asyncrl takes Box, Dict, Tuple, "
            f"Discrete, MultiDiscrete and MultiBinary ones: {wrap}"
        )
    readable = []
    if isinstance(space, gym.spaces.Dict):
        readable = [
            str(k)
            for k, s in space.spaces.items()
            if k != ACTION_MASK_KEY and all(_leaf_kind(x) for _, x in _walk(s, (k,)))
        ]
    if readable:
        top = f"leave {path[0]!r} out" if len(path) > 1 else "leave it out"
        wrap = f"{top} with --obs-keys {' '.join(readable)}, or {wrap}"
    return f"--env: {env_id}'s observation key {_name(path)!r} is {what}: {wrap}"


def encoder_space(space: gym.Space, obs_keys: Sequence[str] = ()) -> gym.Space:
    """The observation space an encoder of the user's own (``--encoder``) is built on: the
    env's, with only the top-level keys ``obs_keys`` of a Dict kept (all by default) and every
    ``action_mask`` key left out, as :func:`obs_layout` reads it (the leaves' order is the
    layout's)."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict(
            [
                (k, encoder_space(sub))
                for k, sub in space.spaces.items()
                if k != ACTION_MASK_KEY and (not obs_keys or k in obs_keys)
            ]
        )
    if isinstance(space, gym.spaces.Tuple):
        return gym.spaces.Tuple([encoder_space(sub) for sub in space.spaces])
    return space


def space_to_json(space: gym.Space) -> str:
    """``space`` (a Box, Discrete, MultiDiscrete, MultiBinary, or a Dict or Tuple of them) as
    JSON text that :func:`space_from_json` rebuilds it from, exactly: how a model's spec
    records the space an encoder of the user's own is built on. A Box's bounds are one number
    where they are all equal (an image's 0 and 255), else the whole array. ValueError for
    another space."""
    return json.dumps(_space_dict(space))


def _bound(values: np.ndarray) -> Any:
    flat = np.asarray(values).ravel()
    if flat.size and bool(np.all(flat == flat[0])):
        # (a bool Box's bound as 0 or 1: Box takes no Python bool for one)
        return int(flat[0]) if flat.dtype == np.bool_ else flat[0].item()
    return np.asarray(values).tolist()


def _space_dict(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": _bound(space.low),
            "high": _bound(space.high),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "start": np.asarray(space.start).tolist(),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": [[k, _space_dict(s)] for k, s in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [_space_dict(s) for s in space.spaces]}
    raise ValueError(f"a {type(space).__name__} space has no JSON form here")


def space_from_json(text: str) -> gym.Space:
    """The space :func:`space_to_json` wrote."""
    return _space_of(json.loads(text))


def _space_of(d: Mapping[str, Any]) -> gym.Space:
    kind = d["type"]
    if kind == "Box":
        dtype = np.dtype(d["dtype"])
        low, high = (
            np.asarray(d[k], dtype) if isinstance(d[k], list) else d[k] for k in ("low", "high")
        )
        return gym.spaces.Box(low, high, tuple(d["shape"]), dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(d["n"]), start=int(d["start"]))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(
            np.asarray(d["nvec"]), np.dtype(d["dtype"]), start=np.asarray(d["start"])
        )
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"])
    if kind == "Dict":
        return gym.spaces.Dict([(k, _space_of(s)) for k, s in d["spaces"]])
    if kind == "Tuple":
        return gym.spaces.Tuple([_space_of(s) for s in d["spaces"]])
    raise ValueError(f"unknown space type {kind!r}")


class PackObservation(gym.ObservationWrapper):
    """An env whose structured observations come as the rows of ``layout``
    (:meth:`ObsLayout.pack`): applied to each env before vectorization."""

    def __init__(self, env: gym.Env, layout: ObsLayout):
        super().__init__(env)
        self.layout = layout
        self.observation_space = layout.space()

    def observation(self, observation: Any) -> np.ndarray:
        return self.layout.pack(observation)


@dataclass(frozen=True)
class PackWrapper:
    """:class:`PackObservation` as ``gymnasium.make_vec(wrappers=...)`` takes it: a callable
    that wraps an env. A class of asyncrl's, not a ``functools.partial``: the vector env keeps
    it, and is pickled whole into a checkpoint, whose env states may name classes of the env
    packages only (:func:`asyncrl.checkpoint.check_env_state`)."""

    layout: ObsLayout

    def __call__(self, env: gym.Env) -> PackObservation:
        return PackObservation(env, self.layout)
