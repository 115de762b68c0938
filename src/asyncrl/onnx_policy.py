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
        self.interface: dict[str, Any] = json.loads(meta)
        self.inputs = {p["name"]: p for p in self.interface["inputs"]}
        self.outputs = [p["name"] for p in self.interface["outputs"]]
        self.discrete = self.interface["action_space"]["kind"] == "discrete"
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
        (``--prev-action-reward``). ``action_mask`` ``(N, n)`` bools, for a policy exported
        with one."""
        feeds, single = self.obs_feeds(obs)
        n = len(next(iter(feeds.values())))
        if self.state is None or len(self.state) != n:
            width = self.inputs["state"]["shape"][1] if "state" in self.inputs else 0
            self.state, self.last_action = np.zeros((n, width), np.float32), None
        starts = np.zeros(n, bool) if first is None else np.asarray(first, bool).reshape(n)
        if "action_mask" in self.inputs:
            if action_mask is None:
                raise ValueError("this policy takes an action mask: pass action_mask=")
            mask = np.asarray(action_mask, bool).reshape(n, -1)
            if not mask.any(axis=1).all():
                raise ValueError("an action mask with no valid action: the env gave none")
            feeds["action_mask"] = mask
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

    def _previous(
        self, n: int, starts: np.ndarray, reward: np.ndarray | float | None
    ) -> dict[str, np.ndarray]:
        """``prev_action`` and ``prev_reward``: the last actions and rewards, and at a start
        (or with no last action) -1 for a Discrete action, zeros for a Box one, reward 0."""
        port = self.inputs["prev_action"]
        none = -1 if self.discrete else 0.0
        shape = (n, *port["shape"][1:])
        if self.last_action is None:
            return {
                "prev_action": np.full(shape, none, np.dtype(port["dtype"])),
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
