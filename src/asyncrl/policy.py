"""Loading a trained policy from a run directory, and evaluating it. Imports no training code
(the trainer, the supervisor, the backends)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch

from asyncrl.actionmask import KEY as ACTION_MASK_KEY
from asyncrl.actionmask import read_masks, without_valid
from asyncrl.algos import REGISTRY
from asyncrl.errors import UserError
from asyncrl.models import (
    ActorCritic,
    ModelSpec,
    QNetwork,
    build_model,
    cpu_has_bfloat16_units,
    write_context,
)
from asyncrl.rundir import RunDir


class Policy:
    """A trained network with ``act(obs)``: the mode of the policy (or argmax Q) by default.

    It acts through the algorithm's :meth:`~asyncrl.algos.base.Algorithm.eval_step`, the network
    call training acts through, and keeps the core's state of each env it is given (empty for
    a feed-forward net): call :meth:`reset` when every env starts an episode, or pass
    ``first`` to :meth:`act` for the envs of a batch that start one. A core that takes the
    previous action and reward (``--prev-action-reward``) gets the policy's own last actions
    and the ``reward`` passed to :meth:`act`."""

    def __init__(
        self,
        model: ActorCritic | QNetwork,
        algo: str,
        spec: ModelSpec,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
    ):
        self.model = model.eval()
        self.algo = algo
        self.spec = spec
        self.env_id = env_id
        self.env_kwargs = env_kwargs or {}
        self._eval_step = REGISTRY[algo].eval_step
        self.state: torch.Tensor | None = None  # the core's state per evaluated env
        # --prev-action-reward: the actions of the last call, as the envs took them
        self.last_action: np.ndarray | None = None
        self.source: Path | None = None  # the file it was loaded from (asyncrl.load)
        self.evaluation: dict[str, Any] | None = None  # the best evaluation, for best_model.pt

    def eval_envs(self, episodes: int, seed: int) -> Any:
        """Evaluation envs for ``episodes`` episodes from ``seed``
        (:func:`asyncrl.envs.make_eval_vec_env`), built as the policy's training envs were:
        its observations packed into the rows it learnt from, its action masks in the info."""
        from asyncrl.envs import make_eval_vec_env

        return make_eval_vec_env(
            self.env_id,
            episodes,
            seed,
            self.env_kwargs,
            self.spec.obs_layout,
            self.spec.action.masked,
        )

    def reset(self) -> None:
        """Forget the core's state: call it when an episode starts (``evaluate`` does)."""
        self.state = None
        self.last_action = None

    @torch.no_grad()
    def act(
        self,
        obs: Any,
        deterministic: bool = True,
        rng: np.random.Generator | None = None,
        first: np.ndarray | None = None,
        reward: np.ndarray | float | None = None,
        *,
        packed: bool = False,
        action_mask: np.ndarray | None = None,
    ) -> np.ndarray | int:
        """Action(s) for one observation (shape ``obs_shape``) or a batch (``(N, *obs_shape)``),
        one env per row; the core's state starts from zero after :meth:`reset` (or when the
        batch size changes), and for the rows where ``first`` (``(N,)`` booleans) says an
        episode starts with this observation, as training marks them.

        A policy trained on a structured observation (a ``Dict`` or ``Tuple``, or a
        ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` one: ``spec.obs_layout``) takes one
        as the env gives it -- a dict (or tuple) of the leaves, or a batch of them: each leaf
        with a leading batch axis -- and packs it into the rows it learnt from
        (:meth:`asyncrl.spaces.ObsLayout.pack`; keys left out by ``--obs-keys`` are ignored).
        ``packed=True``: ``obs`` are those rows already, ``(size,)`` or ``(N, size)``, as its
        training and evaluation envs give them (an array given for a ``Dict`` or ``Tuple``
        observation is read so too).

        ``reward``: the raw reward each env's last step gave (one number for a single
        observation). A policy whose core takes the previous action and reward
        (``--prev-action-reward``) needs it on every call but the first after a reset (or a
        change of batch size), and clips and scales it as training did; others ignore it.

        ``deterministic=False`` samples from the policy with ``rng`` (default: a fresh,
        unseeded generator); the Q methods have no stochastic policy of their own and refuse.
        A single observation gives a single action (an int for Discrete actions). Box actions
        come as the env takes them: clipped to the bounds, or squashed into them by tanh for a
        policy trained with ``--squash``. MultiDiscrete and MultiBinary actions come as arrays
        in the space's shape; Discrete and MultiDiscrete ones with the space's start added.

        ``action_mask``: the valid actions (bool, or integers 0 and 1 as Gymnasium's Taxi
        gives them), one entry per action (MultiDiscrete: the parts' concatenated), for one
        observation or ``(N, ...)`` for a batch, as the env's ``info["action_mask"]``: a masked
        action is never chosen. None: every action is valid (a policy trained with masks then
        acts on its logits alone).
        """
        if isinstance(obs, Mapping) and ACTION_MASK_KEY in obs:
            obs, action_mask = self._mask_of_obs(obs, action_mask)
        layout = self.spec.obs_layout
        array = isinstance(obs, np.ndarray | torch.Tensor)
        if layout is not None and not packed and (layout.leaves[0].path == () or not array):
            try:
                obs = layout.pack(obs)
            except ValueError as e:
                raise UserError(
                    f"Policy.act: the observation does not fit the policy's (leaves "
                    f"{', '.join(layout.names)}): {e}"
                ) from None
        x = torch.as_tensor(np.asarray(obs, dtype=np.dtype(self.spec.obs_dtype)))
        single = tuple(x.shape) == tuple(self.spec.obs_shape)
        if not single and tuple(x.shape[1:]) != tuple(self.spec.obs_shape):
            raise UserError(
                f"Policy.act: an observation of shape {tuple(x.shape)} fits neither "
                f"{self.spec.obs_shape} (one) nor (N, *{self.spec.obs_shape}) (a batch)"
            )
        if single:
            x = x.unsqueeze(0)
        n = x.shape[0]
        state = self.state
        if state is None or state.shape[0] != n:
            state, self.last_action = self.model.initial_state(n), None
        rng = rng if rng is not None else np.random.default_rng()
        starts = torch.zeros(n, dtype=torch.bool)  # a fresh state is already zero
        if first is not None:
            flags = np.asarray(first, dtype=bool)
            if flags.shape != (n,):
                raise UserError(
                    f"Policy.act: first has shape {flags.shape}; give one flag per observation, "
                    f"({n},)"
                )
            starts = torch.from_numpy(flags)
        context = self._context(n, reward, starts)
        mask = None if action_mask is None else self._mask(action_mask, n, single)
        a, self.state = self._eval_step(
            self.model, x, state, starts, deterministic, rng, context, mask
        )
        a = self.spec.action.to_env(a)  # as the workers step their envs: clipped, or squashed
        if context is not None:
            self.last_action = a
        if single:
            return int(a[0]) if self.spec.action.kind == "discrete" else a[0]
        return a

    def _mask_of_obs(self, obs: Mapping, action_mask: Any) -> tuple[Any, Any]:
        """A Dict observation's ``action_mask`` key (PettingZoo's convention) is the mask, not
        a leaf, as training read it (:class:`asyncrl.actionmask.ActionMasks`): the observation
        without it and the mask, unless ``action_mask`` is given too. Where one key is left,
        the policy learnt from that key's value (the wrapper's rule, a Dict value too), unless
        the leaves it reads are all under that key (a policy that reads the Dict itself):
        :class:`asyncrl.onnx_policy.OnnxPolicy`'s rule."""
        rest = {k: v for k, v in obs.items() if k != ACTION_MASK_KEY}
        if action_mask is None and self.spec.action.masked:
            action_mask = obs[ACTION_MASK_KEY]
        if len(rest) == 1:
            ((key, value),) = rest.items()
            layout = self.spec.obs_layout
            if layout is None or not all(leaf.path[:1] == (key,) for leaf in layout.leaves):
                return value, action_mask
        return rest, action_mask

    def _mask(self, action_mask: np.ndarray, n: int, single: bool) -> torch.Tensor:
        """``action_mask`` as the distribution takes it ``(n, mask_dim)`` (bool); one line
        naming the problem where it is not a mask of this policy's actions."""
        action = self.spec.action
        if action.kind not in ("discrete", "multi_discrete"):
            raise UserError(
                f"Policy.act: action_mask is for Discrete and MultiDiscrete actions; this "
                f"policy's are {action.describe()}: drop action_mask"
            )
        m = np.asarray(action_mask)
        dim = action.dim
        want = (dim,) if single else (n, dim)
        if m.shape != want:
            raise UserError(
                f"Policy.act: action_mask has shape {m.shape}; give {want}, one entry per action"
                f"{' (the parts concatenated)' if action.kind == 'multi_discrete' else ''}"
                f"{'' if single else ' for each observation'}"
            )
        zero_one = np.issubdtype(m.dtype, np.integer) and bool(((m == 0) | (m == 1)).all())
        if m.dtype != bool and not zero_one:
            raise UserError(
                f"Policy.act: action_mask has dtype {m.dtype}; give bool (or integers 0 and 1)"
            )
        m = m.astype(bool).reshape(n, dim)
        empty = without_valid(m, action.parts)
        if empty.any():
            raise UserError(
                f"Policy.act: action_mask row {int(np.flatnonzero(empty)[0])} allows no action"
                f"{' in some part' if action.kind == 'multi_discrete' else ''}; give at least "
                "one valid action"
            )
        return torch.from_numpy(m)

    def _context(
        self, n: int, reward: np.ndarray | float | None, starts: torch.Tensor
    ) -> torch.Tensor | None:
        """The core's context for this call (None where the core takes none): zeros for a
        fresh state and at the rows that start an episode, else the last actions and the
        learning rewards of ``reward``."""
        k = self.spec.context_dim
        if not k:
            return None
        out = np.zeros((n, k), np.float32)
        if self.last_action is not None:
            if reward is None:
                raise UserError(
                    "Policy.act: this policy's core takes the previous action and reward "
                    "(--prev-action-reward); pass reward=, what each env's last step gave"
                )
            learnt = self.spec.learning_reward(np.broadcast_to(np.asarray(reward), (n,)))
            write_context(self.spec.action, self.last_action, learnt, out)
            out[starts.numpy()] = 0.0
        return torch.from_numpy(out)

    def act_rows(
        self,
        obs: np.ndarray,
        rows: np.ndarray,
        deterministic: bool = True,
        rng: np.random.Generator | None = None,
        reward: np.ndarray | None = None,
        *,
        packed: bool = False,
        action_mask: np.ndarray | None = None,
    ) -> Any:
        """:meth:`act` for the rows ``rows`` (indices) of the batch ``obs`` alone (the envs
        still in their episode), each from its own core state (and ``reward``'s and
        ``action_mask``'s rows, where given); the other rows' states stay as they were.
        ``packed``: as :meth:`act`'s."""
        state = self.state if self.state is not None else self.model.initial_state(len(obs))
        last = self.last_action
        idx = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        self.state = state[idx]
        self.last_action = None if last is None else last[rows]
        actions = self.act(
            obs[rows],
            deterministic,
            rng,
            reward=None if reward is None else reward[rows],
            packed=packed,
            action_mask=None if action_mask is None else action_mask[rows],
        )
        assert self.state is not None  # act leaves the rows' new states
        self.state = state.index_copy(0, idx, self.state)
        if self.last_action is not None:
            if last is None:  # the rows' first actions: the others' stay unknown (zeros)
                last = np.zeros((len(obs), *self.last_action.shape[1:]), self.last_action.dtype)
            else:  # a copy: ``last`` is the array an earlier call returned to its caller
                last = last.copy()
            last[rows] = self.last_action
            self.last_action = last
        return actions


class Stopped(Exception):
    """:func:`play_episodes` was told to stop before its episodes ended."""


class OutOfTime(Stopped):
    """:func:`play_episodes` reached its deadline before its episodes ended: those that did
    were handed to its ``on_episode`` as they ended."""


class StopFlag(Protocol):
    """What tells :func:`play_episodes` to stop (a :class:`threading.Event`, or any object
    with ``is_set``)."""

    def is_set(self) -> bool: ...


def play_episodes(
    policy: Policy,
    envs: Any,
    seeds: list[int],
    deterministic: bool = True,
    rng: np.random.Generator | None = None,
    stop: StopFlag | None = None,
    deadline: float | Callable[[], float | None] | None = None,
    on_episode: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Returns of ``len(seeds)`` whole episodes played in waves on the vector env ``envs``
    (:func:`asyncrl.envs.make_eval_vec_env`), one batched forward pass a step for the wave;
    each wave resets with its seeds (a natively vectorized env takes the first for the
    batch). Where the envs are separate (a ``SyncVectorEnv``: Atari's), only those still in
    their episode are stepped, and acted for: a Pong wave lasts as long as its longest game,
    up to 108,000 frames where a greedy policy stalls. A natively vectorized env steps all of
    them, and an ended episode is ignored until the wave ends. The same call gives the same
    returns. Raises :class:`Stopped` at the first step after ``stop`` is set, and
    :class:`OutOfTime` at the first step at or after ``deadline`` (a
    :func:`time.perf_counter` instant, or a function that tells it at each step: None for
    none). ``on_episode(i, ret)`` is called as episode ``i`` (of ``seeds``) ends: a caller
    that is stopped or runs out of time keeps the episodes that ended. A bfloat16 conv net
    acts on its weights converted once for the call (:meth:`Network.fixed_weights`), as a
    worker's rollout does."""
    import gymnasium as gym

    from asyncrl.envs import reset_vec_env

    n = envs.num_envs
    separate = isinstance(envs, gym.vector.SyncVectorEnv)
    until = deadline if callable(deadline) else lambda: deadline
    returns: list[float] = []
    # an env with action masks (each env's in its info: asyncrl.actionmask): the policy
    # chooses among the valid actions, as in training
    action = policy.spec.action
    masked = action.masked

    def masks_of(info: dict, ended: np.ndarray | None) -> np.ndarray | None:
        return read_masks(info, n, action.parts, ended, policy.env_id) if masked else None

    # the parameters stay as they are for the episodes: a bfloat16 conv net acts on weights
    # converted once, as a worker's rollout does (Network.fixed_weights)
    with policy.model.fixed_weights():
        for start in range(0, len(seeds), n):
            wave = seeds[start : start + n]
            obs, info = reset_vec_env(envs, wave + [wave[-1] + 1 + i for i in range(n - len(wave))])
            obs = np.array(obs)  # its rows are overwritten below; the vector env's are not ours
            masks = masks_of(info, None)
            policy.reset()  # each episode starts from a zero core state
            totals = np.zeros(n)
            rewards = np.zeros(n)  # each env's last (for a core that takes it)
            live = np.arange(n) < len(wave)
            while live.any():
                if stop is not None and stop.is_set():
                    raise Stopped
                if (t := until()) is not None and time.perf_counter() >= t:
                    raise OutOfTime
                was = live.copy()
                if separate:
                    rows = np.flatnonzero(live)
                    actions = policy.act_rows(
                        obs, rows, deterministic, rng, rewards, packed=True, action_mask=masks
                    )
                    for i, a in zip(rows, actions, strict=True):
                        obs[i], rewards[i], term, trunc, info = envs.envs[i].step(a)
                        totals[i] += float(rewards[i])
                        live[i] = not (term or trunc)
                        if masks is not None:
                            masks[i] = info["action_mask"]
                    if masks is not None:  # (the ended envs' are never read again)
                        masks = masks_of({"action_mask": masks}, ~live)
                else:
                    actions = policy.act(
                        obs, deterministic, rng, reward=rewards, packed=True, action_mask=masks
                    )
                    obs, rewards, term, trunc, info = envs.step(actions)
                    totals += np.where(live, rewards, 0.0)
                    live &= ~(term | trunc)
                    masks = masks_of(info, term | trunc)
                if on_episode is not None:
                    for i in np.flatnonzero(was & ~live):
                        on_episode(start + int(i), float(totals[i]))
            returns.extend(totals[: len(wave)].tolist())
    return returns


Which = Literal["best", "last"]


def load(run_dir: str | Path, which: Which | None = None) -> Policy:
    """The policy saved in ``run_dir`` by ``asyncrl train``: ``best`` (``best_model.pt``, the
    parameters with the best evaluation during training), ``last`` (``model.pt``, the final
    parameters), or by default the best where the run has one. ``Policy.source`` says which
    file was loaded, and ``Policy.evaluation`` the evaluation that made it the best."""
    run = RunDir.existing(run_dir, "config")
    if which not in (None, "best", "last"):
        raise UserError(f"--which: choose best or last, got {which!r}")
    has_best = run.best_model.is_file()
    if which == "best" and not has_best:
        raise UserError(
            f"--which best: {run.path} has no best_model.pt (the run made no evaluation); "
            "use --which last"
        )
    path = run.best_model if which != "last" and has_best else run.model
    if not path.is_file():  # model.pt is written when a run ends: this one is running or was killed
        best = " (or --which best, for best_model.pt)" if has_best else ""
        raise UserError(
            f"{run.path} has no model.pt yet: the run is still training, or was stopped before "
            f"it ended; wait for it, or go on with asyncrl train --resume {run.path}{best}"
        )
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        spec = ModelSpec.from_dict(blob["spec"])
        if spec.precision == "bfloat16" and not cpu_has_bfloat16_units():
            # the parameters are float32 whatever the run computed in, and this CPU would only
            # emulate bfloat16: float32 is the more precise and, here, the faster
            spec = dataclasses.replace(spec, precision="float32")
        model = build_model(spec)
        model.load_state_dict(blob["state_dict"])
    except UserError:  # an encoder of the user's own that does not import here: its own line
        raise
    except Exception as e:  # one line: torch.load's messages run to several
        first = next(iter(str(e).splitlines()), "")
        raise UserError(f"{path} cannot be read ({type(e).__name__}: {first})") from None
    from asyncrl.envs import parse_env_kwargs

    cfg = run.read_config()
    if not isinstance(cfg.get("env"), str):
        raise UserError(f"{run.config} names no env (its 'env' field); it is not a run's config")
    policy = Policy(
        model, blob["algo"], spec, cfg["env"], parse_env_kwargs(cfg.get("env_kwargs", ()))
    )
    policy.source, policy.evaluation = path, blob.get("evaluation")
    return policy


def describe(policy: Policy) -> str:
    """Which model file a loaded policy came from, in words."""
    ev, name = policy.evaluation, "model" if policy.source is None else policy.source.name
    if ev is None:
        return f"{name} (the final parameters)"
    return (
        f"{name} (the best evaluation: mean {ev['mean']:.1f} over "
        f"{ev['episodes']} episodes at step {ev['global_step']:,})"
    )


def check_evaluation(episodes: int, seed: int) -> None:
    """:func:`evaluate`'s numbers, refused before anything is loaded or played."""
    if episodes < 1:
        raise UserError(f"--episodes: must be >= 1, got {episodes}")
    if seed < 0:  # numpy's generators and gymnasium's resets take none below 0
        raise UserError(f"--seed: must be >= 0, got {seed}")


def evaluate(
    run_dir: str | Path,
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    video: str | Path | None = None,
    which: Which | None = None,
) -> list[float]:
    """Returns of ``episodes`` full episodes (whole games with no-op starts on Atari) of the
    saved policy, played as the evaluations during training play them
    (:func:`play_episodes`: in waves, one batched forward pass a step). Episode i resets with
    ``seed + i`` where the envs are separate (Atari's); a natively vectorized env (CartPole's)
    draws a wave's starts from the wave's first seed. A stochastic policy samples with a
    generator seeded by ``seed``: the same call gives the same returns. With ``video``, the
    episodes are played one after the other on one env and recorded to that MP4 file (H.264,
    plays in browsers)."""
    from asyncrl.envs import make_eval_env

    check_evaluation(episodes, seed)
    policy = load(run_dir, which)
    if not deterministic and policy.spec.kind != "actor-critic":
        # the clear refusal
        zeros = np.zeros(policy.spec.obs_shape, policy.spec.obs_dtype)
        policy.act(zeros, deterministic=False, packed=True)
    rng = np.random.default_rng(seed)
    if video is None:
        with _runnable(policy.env_id):
            envs = policy.eval_envs(episodes, seed)
        try:
            return play_episodes(
                policy, envs, [seed + i for i in range(episodes)], deterministic, rng
            )
        finally:
            envs.close()
    writer = _video_writer(Path(video), policy.env_id)
    try:
        with _runnable(policy.env_id):
            env = make_eval_env(
                policy.env_id,
                seed,
                "rgb_array",
                policy.env_kwargs,
                policy.spec.obs_layout,
                policy.spec.action.masked,
            )
            env.reset(seed=seed)
            env.render()  # fails here, not mid-file, if the env cannot render
    except UserError:
        writer.close()
        Path(video).unlink(missing_ok=True)
        raise
    returns = []
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed + i)
            policy.reset()  # a recurrent policy starts each episode from a zero state
            total, done, last = 0.0, False, 0.0
            while not done:
                writer.append_data(_frame(env.render()))
                mask = info.get("action_mask")  # (an env with masks: asyncrl.actionmask)
                action = policy.act(
                    obs, deterministic, rng, reward=last, packed=True, action_mask=mask
                )
                obs, r, term, trunc, info = env.step(action)
                last = float(r)
                total += last
                done = term or trunc
            returns.append(total)
    finally:
        env.close()
        writer.close()
    return returns


@contextlib.contextmanager
def _runnable(env_id: str) -> Iterator[None]:
    """A missing dependency of the env (Box2D, MuJoCo, a renderer) as a one-line UserError."""
    import gymnasium as gym

    try:
        yield
    except gym.error.DependencyNotInstalled as e:
        raise UserError(f"{env_id} cannot run or render here: {e}") from None


def _video_writer(path: Path, env_id: str) -> Any:
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise UserError(
            "--video needs imageio with ffmpeg; install the extra: "
            "pip install -c constraints.txt -e '.[video]'"
        ) from None
    if path.suffix.lower() != ".mp4":
        raise UserError(f"--video: give a .mp4 file name, got {path}")
    if path.exists():
        raise UserError(f"--video: {path} exists; choose a new file (nothing was overwritten)")
    if not path.parent.is_dir():
        raise UserError(f"--video: directory {path.parent} does not exist")
    fps = 30 if "ALE/" in env_id or "NoFrameskip" in env_id else 15
    # yuv420p + H.264: what browsers play (frames are padded to multiples of 16 in _frame)
    return imageio.get_writer(
        path, fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=1
    )


def _frame(frame: Any) -> np.ndarray:
    """An RGB uint8 frame, scaled up when tiny (MinAtar renders 10x10) so a video shows it."""
    a = np.asarray(frame)
    if a.dtype != np.uint8:
        a = (np.clip(a, 0, 1) * 255).astype(np.uint8) if a.max() <= 1 else a.astype(np.uint8)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, axis=-1)
    scale = max(1, 160 // max(a.shape[:2]))
    if scale > 1:
        a = np.kron(a, np.ones((scale, scale, 1), np.uint8))
    pad = [(0, -a.shape[0] % 16), (0, -a.shape[1] % 16), (0, 0)]
    return np.pad(a[..., :3], pad, mode="edge")
