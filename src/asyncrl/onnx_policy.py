"""Run a policy written by ``asyncrl export --format onnx`` with onnxruntime and NumPy alone.

This file imports neither PyTorch nor any other asyncrl module: copy it beside the ``.onnx``
file to deploy on a machine with only ``pip install onnxruntime numpy``. :class:`OnnxPolicy`
keeps what ``asyncrl.Policy`` keeps between calls (the core's state per env, the last actions
for a core that takes them) and feeds the module's inputs (docs/export.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: the key of a Dict observation that holds the action mask (PettingZoo's convention), as
#: ``asyncrl.actionmask.KEY``
MASK_KEY = "action_mask"


class OnnxPolicy:
    """The greedy policy in an exported ONNX file: ``act(obs)`` for a batch of envs, one row
    each (or one observation; a ``Dict`` or ``Tuple`` one as a dict or tuple of its leaves),
    as ``asyncrl.Policy.act`` acts. ``interface`` is the file's
    description of its inputs and outputs (names, shapes, dtypes) and of its action space."""

    def __init__(self, path: str | Path, providers: tuple[str, ...] = ("CPUExecutionProvider",)):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=list(providers))
        meta = self.session.get_modelmeta().custom_metadata_map.get("asyncrl")
        if meta is None:
            raise ValueError(f"{path} is not a policy asyncrl export wrote (no asyncrl metadata)")
        self.read_interface(json.loads(meta))

    def read_interface(self, interface: dict[str, Any]) -> None:
        """Take the file's description of itself (its metadata's JSON), and start every env's
        episode."""
        self.interface = interface
        self.inputs = {p["name"]: p for p in self.interface["inputs"]}
        self.outputs = [p["name"] for p in self.interface["outputs"]]
        space = self.interface["action_space"]
        self.discrete = space["kind"] == "discrete"
        # the categorical parts an action mask masks, each its own: Discrete's one,
        # MultiDiscrete's each (files written before MultiDiscrete actions have no nvec)
        self.parts = [space["n"]] if self.discrete else list(space.get("nvec") or [])
        self.state: np.ndarray | None = None  # the core's state per env (a recurrent core)
        self.last_action: np.ndarray | None = None  # for a core that takes it

    def reset(self) -> None:
        """Forget the core's state and the last actions: every env starts an episode."""
        self.state = None
        self.last_action = None

    def run(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        """One call of the module: every input by name, each cast to its dtype; the outputs by
        name."""
        missing = set(self.inputs) - set(feeds)
        if missing:
            raise ValueError(f"the policy takes {sorted(missing)} too")
        cast = {k: np.asarray(v, np.dtype(self.inputs[k]["dtype"])) for k, v in feeds.items()}
        return dict(zip(self.outputs, self.session.run(self.outputs, cast), strict=True))

    def act(
        self,
        obs: Any,
        action_mask: np.ndarray | None = None,
        first: np.ndarray | None = None,
        reward: np.ndarray | float | None = None,
    ) -> Any:
        """Greedy actions for observations ``(N, *obs_shape)`` (or one, without the batch
        axis), each row an env's; a ``Dict`` or ``Tuple`` observation as the env gives it (a
        dict or tuple; keys the policy does not read are ignored), each leaf with a leading
        batch axis for a batch (:meth:`obs_feeds`). ``first`` ``(N,)``: the envs whose
        episode starts with this observation (their state restarts from zero; after
        :meth:`reset`, or a change of batch size, all do). ``reward``: each env's last raw
        reward, for a core that takes the previous action and reward
        (``--prev-action-reward``).

        ``action_mask``: the valid actions, for a policy exported with a mask (an env that gives
        them): ``(mask_dim,)`` for one observation, ``(N, mask_dim)`` for a batch, bool or
        integers 0 and 1 (Taxi's int8), one entry per action (MultiDiscrete: the parts'
        concatenated), as the env's ``info["action_mask"]``. A ``Dict`` observation's
        ``action_mask`` key is the mask where ``action_mask`` is not given, and is no leaf: the
        env's own dict is taken as it comes, as training read it (where one other key is
        left, the policy learnt from that key's value alone: :meth:`split_mask`)."""
        if isinstance(obs, dict) and MASK_KEY in obs:
            obs, in_obs = self.split_mask(obs)
            if action_mask is None and "action_mask" in self.inputs:
                action_mask = in_obs
        feeds, single = self.obs_feeds(obs)
        n = len(next(iter(feeds.values())))
        if self.state is None or len(self.state) != n:
            width = self.inputs["state"]["shape"][1] if "state" in self.inputs else 0
            self.state, self.last_action = np.zeros((n, width), np.float32), None
        starts = np.zeros(n, bool) if first is None else np.asarray(first, bool).reshape(n)
        if "action_mask" in self.inputs:
            if action_mask is None:
                raise ValueError("this policy takes an action mask: pass action_mask=")
            feeds["action_mask"] = self._mask(action_mask, n, single)
        elif action_mask is not None:
            raise ValueError("this policy was exported without an action mask input")
        if "state" in self.inputs:
            feeds["state"] = np.where(starts[:, None], 0.0, self.state).astype(np.float32)
        if "prev_action" in self.inputs:
            feeds.update(self._previous(n, starts, reward))
        out = self.run(**feeds)
        if "state_out" in out:
            self.state = out["state_out"]
        action = out["action"]
        self.last_action = action
        if single:
            return int(action[0]) if self.discrete else action[0]
        return action

    def split_mask(self, obs: dict[str, Any]) -> tuple[Any, Any]:
        """A Dict observation as the env gives it, less its ``action_mask`` key, and that key's
        value: what training read (``asyncrl.actionmask.ActionMasks``). Where one other key
        is left, the policy learnt from that key's value alone (the wrapper's rule), unless the
        leaves the policy reads are all under that key (a policy that reads the Dict itself)."""
        rest = {k: v for k, v in obs.items() if k != MASK_KEY}
        if len(rest) == 1:
            ((key, value),) = rest.items()
            leaves = self.interface.get("obs_leaves") or []
            if not leaves or not all(leaf["path"][:1] == [key] for leaf in leaves):
                return value, obs[MASK_KEY]
        return rest, obs[MASK_KEY]

    def _mask(self, action_mask: Any, n: int, single: bool) -> np.ndarray:
        """``action_mask`` as the module takes it, ``(n, mask_dim)`` bools; a ``ValueError``
        naming the problem where it is of another shape, not bool nor 0 and 1, or has a row
        (a part, for MultiDiscrete) with no valid action: the env's fault, which the module
        cannot report (it would take that part's first action)."""
        m = np.asarray(action_mask)
        dim = int(self.inputs["action_mask"]["shape"][1])
        want = (dim,) if single else (n, dim)
        if m.shape != want:
            raise ValueError(
                f"action_mask has shape {m.shape}; the policy takes {want}, one entry per "
                "action (MultiDiscrete: the parts' concatenated)"
            )
        zero_one = np.issubdtype(m.dtype, np.integer) and bool(((m == 0) | (m == 1)).all())
        if m.dtype != bool and not zero_one:
            raise ValueError(f"action_mask has dtype {m.dtype}; give bool (or integers 0 and 1)")
        m = m.astype(bool).reshape(n, dim)
        parts = self.parts if sum(self.parts) == dim else [dim]
        offsets = np.cumsum([0, *parts[:-1]])
        empty = ~np.logical_or.reduceat(m, offsets, axis=1).all(axis=1)
        if empty.any():
            where = " in some part" if len(parts) > 1 else ""
            raise ValueError(
                f"action_mask row {int(np.flatnonzero(empty)[0])} has no valid action{where}: "
                "the env gave none"
            )
        return m

    def obs_feeds(self, obs: Any) -> tuple[dict[str, np.ndarray], bool]:
        """The observation inputs of ``obs``, each with the batch axis, and whether ``obs`` was
        one observation (no batch axis). A Box observation is the ``obs`` input; a structured
        one's leaves are found by their key paths (the metadata's ``obs_leaves``) in the dicts
        and tuples of ``obs``, and all of them must be single, or batches of one size."""
        leaves = self.interface.get("obs_leaves") or [{"input": "obs", "path": []}]
        feeds: dict[str, np.ndarray] = {}
        single: bool | None = None
        for leaf in leaves:
            name, port = leaf["input"], self.inputs[leaf["input"]]
            x = np.asarray(_lookup(obs, leaf), np.dtype(port["dtype"]))
            shape = tuple(port["shape"][1:])
            one = x.shape == shape
            if not one and x.shape[1:] != shape:
                raise ValueError(
                    f"{name} has shape {x.shape}; the policy takes {shape} (one observation) or "
                    f"(N, *{shape}) (a batch)"
                )
            if single is not None and one != single:
                raise ValueError(
                    f"{name} is {'one observation' if one else 'a batch'} and the leaf before it "
                    "is not: give every leaf the batch axis, or none"
                )
            single = one
            feeds[name] = x[None] if one else x
        sizes = {len(x) for x in feeds.values()}
        if len(sizes) > 1:
            raise ValueError(f"the leaves have batches of different sizes {sorted(sizes)}")
        return feeds, bool(single)

    def no_action(self) -> np.ndarray:
        """The ``prev_action`` of an episode's first step, one env's: one below the space's
        start for Discrete actions (-1 for a space from 0) and each part's for MultiDiscrete,
        whose one-hot inside the module is all zeros; zeros for MultiBinary and Box."""
        space, port = self.interface["action_space"], self.inputs["prev_action"]
        shape = tuple(port["shape"][1:])
        if space["kind"] in ("discrete", "multi_discrete"):
            start = np.asarray(space.get("start") or [0] * len(self.parts), np.int64)
            return (start - 1).reshape(shape)
        return np.zeros(shape, np.dtype(port["dtype"]))

    def _previous(
        self, n: int, starts: np.ndarray, reward: np.ndarray | float | None
    ) -> dict[str, np.ndarray]:
        """``prev_action`` and ``prev_reward``: the last actions and rewards, and at a start
        (or with no last action) :meth:`no_action` and reward 0."""
        port = self.inputs["prev_action"]
        none = self.no_action()
        shape = (n, *port["shape"][1:])
        if self.last_action is None:
            return {
                "prev_action": np.broadcast_to(none, shape).astype(np.dtype(port["dtype"])),
                "prev_reward": np.zeros(n, np.float32),
            }
        if reward is None:
            raise ValueError(
                "this policy's core takes the previous action and reward: pass reward=, what "
                "each env's last step gave"
            )
        rows = starts.reshape((n,) + (1,) * (len(shape) - 1))
        action = np.where(rows, none, self.last_action).astype(np.dtype(port["dtype"]))
        r = np.broadcast_to(np.asarray(reward, np.float32), (n,))
        return {"prev_action": action, "prev_reward": np.where(starts, 0.0, r).astype(np.float32)}


def _lookup(obs: Any, leaf: dict[str, Any]) -> Any:
    """The value of ``leaf`` (an entry of the metadata's ``obs_leaves``) in an observation:
    the Dict keys and Tuple indices of its key path, outermost first."""
    node, path = obs, leaf["path"]
    for depth, key in enumerate(path):
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            inner = ".".join(str(k) for k in path[:depth])
            where = f"the observation's {inner}" if inner else "the observation"
            raise ValueError(
                f"{where} has no {key!r} (the input {leaf['input']} reads "
                f"{'.'.join(map(str, path))})"
            ) from None
    return node
