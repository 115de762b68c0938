"""Environment construction, space checks and seeds.

Workers step a Gymnasium *vector* env (several copies of the env in one batched forward pass).
Where the env ships a natively vectorized implementation (CartPole does, and ale-py's Atari
games do, in C++), it is used: one step for the whole batch instead of a Python loop over envs.

Gymnasium 1.x vector envs autoreset in *next-step* mode: the step that ends an episode returns
the final observation, and the following step resets that env (its action is ignored, its reward
is 0). The worker therefore sees the final observation as the next row of the rollout -- which is
exactly what a truncated episode must bootstrap from -- and masks out the reset step.

The spaces drive the data: :class:`EnvInfo` carries the observation shape and dtype and the
action space, and the rollout buffer, the network's encoder and the action distribution are
built from them (uint8 images stay uint8 until the network divides them by 255). A ``Dict`` or
``Tuple`` observation (or a ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` one) is packed
into one row an env step by a wrapper on each env, its layout (:mod:`asyncrl.spaces`) in
:attr:`EnvInfo.obs_layout`: the env factories here apply it, so a worker, an evaluation and a
video all step envs whose observations are the rows.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from asyncrl import atari
from asyncrl.actionmask import ActionMasks, check_probed_mask, mask_source
from asyncrl.errors import UserError
from asyncrl.spaces import (
    ObsLayout,
    PackObservation,
    PackWrapper,
    encoder_space,
    obs_layout,
    space_to_json,
)

#: each action kind as Gymnasium names its space (for messages)
ACTION_SPACE_NAMES = {
    "discrete": "Discrete",
    "box": "Box",
    "multi_discrete": "MultiDiscrete",
    "multi_binary": "MultiBinary",
}

ActionKind = Literal["discrete", "box", "multi_discrete", "multi_binary"]


@dataclass(frozen=True)
class ActionSpace:
    """The action space as plain data (it travels to worker processes, Ray actors and
    checkpoints): ``discrete`` with ``n`` actions, ``box`` with ``shape`` and bounds,
    ``multi_discrete`` with ``nvec`` (the parts' sizes, flattened; ``shape`` the space's), or
    ``multi_binary`` with ``shape`` bits.

    The policy acts in 0..n-1 (per part); ``start`` (Discrete's and MultiDiscrete's, flattened;
    empty where all are 0) is added by :meth:`to_env`, as for Box's clipping: the rollout keeps
    the policy's own action. ``squash``: the policy's Box actions are squashed into the bounds
    with tanh rather than clipped (``--squash``; set on the model's copy of the space).
    ``masked``: the env says which actions are valid at each step (``info["action_mask"]``
    after :class:`asyncrl.actionmask.ActionMasks`), found by :func:`probe_env`."""

    kind: ActionKind
    n: int = 0
    shape: tuple[int, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    squash: bool = False
    nvec: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    masked: bool = False

    @property
    def dtype(self) -> type:
        return np.float32 if self.kind == "box" else np.int64

    @property
    def dim(self) -> int:
        """Outputs of the policy head: logits per action (Discrete, one set per part for
        MultiDiscrete), one per bit (MultiBinary), or one mean per action dimension (Box)."""
        if self.kind == "discrete":
            return self.n
        if self.kind == "multi_discrete":
            return sum(self.nvec)
        return int(np.prod(self.shape))

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The policy's action for one env, as the rollout stores it: () for Discrete, the
        parts or bits flattened for MultiDiscrete and MultiBinary, the shape for Box."""
        if self.kind == "discrete":
            return ()
        if self.kind == "multi_discrete":
            return (len(self.nvec),)
        if self.kind == "multi_binary":
            return (self.dim,)
        return self.shape

    @property
    def parts(self) -> tuple[int, ...]:
        """The sizes of the categorical parts of the policy's logits: Discrete's one, a
        MultiDiscrete space's each (an action mask masks each part's actions)."""
        return (self.n,) if self.kind == "discrete" else self.nvec

    @property
    def mask_dim(self) -> int:
        """The entries of an action mask: one per logit (Discrete, MultiDiscrete's parts
        concatenated); 0 where the env gives none."""
        return self.dim if self.masked else 0

    @classmethod
    def from_gym(cls, space: gym.Space) -> ActionSpace | None:
        if isinstance(space, gym.spaces.Discrete):
            start = int(space.start)
            return cls("discrete", n=int(space.n), start=(start,) if start else ())
        if isinstance(space, gym.spaces.MultiDiscrete):
            starts = tuple(int(x) for x in np.ravel(space.start))
            return cls(
                "multi_discrete",
                shape=tuple(space.shape),
                nvec=tuple(int(x) for x in np.ravel(space.nvec)),
                start=starts if any(starts) else (),
            )
        if isinstance(space, gym.spaces.MultiBinary):
            return cls("multi_binary", shape=tuple(space.shape))
        if isinstance(space, gym.spaces.Box) and space.shape is not None:
            return cls(
                "box",
                shape=tuple(space.shape),
                low=tuple(float(x) for x in np.ravel(space.low)),
                high=tuple(float(x) for x in np.ravel(space.high)),
            )
        return None

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """What the env is given for a policy's actions ``(B, *sample_shape)``. Discrete and
        MultiDiscrete: the start added (each part's), in the space's shape; MultiBinary: the
        bits as int8 in the space's shape. Box: the Gaussian sample clipped to the bounds, or
        with ``squash`` mapped into them by tanh; either way the rollout, and so the
        log-probability, keeps the sample itself (as SB3 does)."""
        if self.kind == "discrete":
            return action + self.start[0] if self.start else action
        if self.kind == "multi_discrete":
            out = action + np.asarray(self.start, np.int64) if self.start else action
            return out.reshape(len(action), *self.shape)
        if self.kind == "multi_binary":
            return action.astype(np.int8).reshape(len(action), *self.shape)
        low = np.asarray(self.low, np.float32).reshape(self.shape)
        high = np.asarray(self.high, np.float32).reshape(self.shape)
        if self.squash:
            return (low + (np.tanh(action) + 1.0) * 0.5 * (high - low)).astype(np.float32)
        return np.clip(action, low, high)

    def from_env(self, action: np.ndarray) -> np.ndarray:
        """The policy's actions ``(B, *sample_shape)`` of actions ``(B, ...)`` as the env took
        them: :meth:`to_env` undone for the discrete kinds (Box's are kept as taken)."""
        a = np.asarray(action)
        if self.kind == "box":
            return a
        if self.kind == "discrete":
            return a - self.start[0] if self.start else a
        a = a.reshape(len(a), -1).astype(np.int64)
        return a - np.asarray(self.start, np.int64) if self.start else a

    def describe(self) -> str:
        return ACTION_SPACE_NAMES[self.kind]


@dataclass(frozen=True)
class EnvInfo:
    """What the trainer learns from probing the env once."""

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str  # numpy dtype name: "float32", "uint8", "bool", ...
    action: ActionSpace
    reward_threshold: float | None = None
    max_episode_steps: int | None = None
    #: emulator frames per agent step (4 for Atari with action repeat 4)
    frames_per_step: int = 1
    #: the training env's learning reward is its reward clipped to +-this (Atari's: 1), where
    #: evaluation's envs give the raw score; 0: the reward itself
    reward_clip: float = 0.0
    #: the preset the env calls for where the user names none (:func:`preset_for`)
    preset: str = "cartpole"
    #: the ``gymnasium.make`` arguments the env was probed with (--env-kwargs)
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    #: the top-level keys of a Dict observation the env was probed with (--obs-keys; (): all)
    obs_keys: tuple[str, ...] = ()
    #: a structured observation's leaves, packed into rows of ``obs_shape`` (``(size,)``) and
    #: ``obs_dtype``; None: a Box, stored as it is
    obs_layout: ObsLayout | None = None
    #: the observation space (--obs-keys kept, no action_mask key) as JSON
    #: (:func:`asyncrl.spaces.space_to_json`): what an encoder of the user's own is built on;
    #: "": not recorded (an EnvInfo made by hand)
    obs_space: str = ""

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    def has_vectors(self, net: str = "auto") -> bool:
        """Whether some observation is a vector, which --normalize-obs normalises: a Box of
        rank 1, or a vector leaf of a structured one (an image leaf too under ``--net mlp``,
        which reads it as a vector)."""
        if self.obs_layout is None:
            return len(self.obs_shape) == 1
        kinds = ("vector", "image") if net == "mlp" else ("vector",)
        return any(leaf.kind in kinds for leaf in self.obs_layout.leaves)

    def describe_obs(self) -> str:
        """The observations in a few words: their shape, or their leaves' names and kinds."""
        if self.obs_layout is None:
            return str(self.obs_shape)
        return ", ".join(f"{leaf.describe()} ({leaf.kind})" for leaf in self.obs_layout.leaves)

    @property
    def n_actions(self) -> int:
        return self.action.n


def _import_env_module(module: str) -> None:
    """Import an env's module as ``python -m`` would: the ``asyncrl`` command's sys.path lacks
    the working directory, where a user's own env module usually is, so it is tried there when
    the module itself (not one of its imports) is missing."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        itself = e.name is not None and (module == e.name or module.startswith(e.name + "."))
        if not itself or os.getcwd() in sys.path:
            raise
        top = module.split(".")[0]
        if top in sys.modules:  # an installed package of that name was found first
            raise ModuleNotFoundError(
                f"{e}; {top!r} is the installed {getattr(sys.modules[top], '__file__', None)} "
                "(a module of yours of that name in the working directory needs another name)"
            ) from None
        sys.path.insert(0, os.getcwd())
        importlib.import_module(module)


def _import_prefix(env_id: str) -> str:
    """``package.module:Env-v0`` imports the module (which registers the env) first, as
    ``gymnasium.make`` does; every worker, on any backend or machine, does the same. Families
    that need a registration call (MinAtar) get it here."""
    module, sep, plain = env_id.rpartition(":")
    if sep:
        try:
            _import_env_module(module)
        except ImportError as e:
            raise UserError(
                f"--env: cannot import {module!r} for {plain}: {e} (run from the directory "
                "that holds it, or add that directory to PYTHONPATH)"
            ) from None
    if plain.startswith("MinAtar/"):
        try:
            import minatar.gym
        except ImportError:
            raise UserError(
                f"--env: {plain} needs MinAtar; install the extra: "
                "pip install -c constraints.txt -e '.[minatar]'"
            ) from None
        if plain not in gym.registry:
            minatar.gym.register_envs()
    if plain.startswith(("MiniGrid-", "BabyAI-")) and plain not in gym.registry:
        try:
            import minigrid  # registers its envs on import
        except ImportError:
            raise UserError(
                f"--env: {plain} needs MiniGrid; install the extra: "
                "pip install -c constraints.txt -e '.[minigrid]'"
            ) from None
        if plain not in gym.registry:
            minigrid.register_minigrid_envs()
    return plain


def is_atari(spec: gym.envs.registration.EnvSpec) -> bool:
    return atari.is_ale_spec(spec)


def is_mujoco(spec: gym.envs.registration.EnvSpec) -> bool:
    """Gymnasium's MuJoCo tasks (HalfCheetah, Hopper, Walker2d, Ant, ...)."""
    return str(spec.entry_point).startswith("gymnasium.envs.mujoco")


def is_box2d(spec: gym.envs.registration.EnvSpec) -> bool:
    """Gymnasium's Box2D tasks (LunarLander, BipedalWalker, CarRacing)."""
    return str(spec.entry_point).startswith("gymnasium.envs.box2d")


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    plain = _import_prefix(env_id)
    # ale-py registers its games only when imported (Gymnasium 1.x): ids not registered yet are
    # looked up after that (CartPole never pays for importing ale-py); an Atari id without
    # ale-py gets atari_settings' one-line install error
    if plain not in gym.registry and atari.is_atari_id(plain):
        atari.atari_settings(plain)
    try:
        return gym.spec(plain)
    except gym.error.Error as e:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else "list ids with gymnasium.pprint_registry()"
        )
        raise UserError(
            f"--env: unknown environment id {env_id!r} ({type(e).__name__}); {hint}"
        ) from None


def parse_env_kwargs(
    pairs: tuple[str, ...] | list[str], flag: str = "--env-kwargs"
) -> dict[str, Any]:
    """``("continuous=true", "g=9.8")`` -> ``{"continuous": True, "g": 9.8}``: values are JSON
    or Python literals (true/false/none in either case), else strings. ``flag``: the option
    a malformed pair is refused under (``--encoder-kwargs`` reads its pairs so too)."""
    import ast
    import json

    if isinstance(pairs, str):  # env_kwargs="k=v" would be read letter by letter
        name = flag.removeprefix("--").replace("-", "_")
        raise UserError(
            f"{name}: a tuple of KEY=VALUE strings, got the string {pairs!r}: give ({pairs!r},)"
        )
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UserError(f"{flag}: give KEY=VALUE pairs, got {pair!r}")
        lowered = {"true": "True", "false": "False", "none": "None", "null": "None"}
        text = lowered.get(text.lower(), text)
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            try:
                out[key] = json.loads(text)
            except ValueError:
                out[key] = text
    return out


def preset_for(
    spec: gym.envs.registration.EnvSpec, action: ActionSpace | None = None
) -> str | None:
    """The preset (:mod:`asyncrl.presets`) an env calls for where the user names none: the
    first rule of ``rules.toml`` that holds. None: a rule needs the action space, and
    ``action`` is not given (the env was not built)."""
    from asyncrl.presets import rules

    family = {"atari": is_atari, "mujoco": is_mujoco, "box2d": is_box2d}
    for rule in rules():
        if not spec.id.startswith(rule.get("id_prefix", "")):
            continue
        if "family" in rule and not family[rule["family"]](spec):
            continue
        if "box_actions" in rule:
            if action is None:
                return None
            if (action.kind == "box") != rule["box_actions"]:
                continue
        return str(rule["preset"])
    return "cartpole"


def probe_env(
    env_id: str, kwargs: dict[str, Any] | None = None, obs_keys: tuple[str, ...] = ()
) -> EnvInfo:
    """Build the env once to read its spaces; reject spaces no algorithm can handle. Whether
    the algorithm takes the action space is the algorithm's call (``Algorithm.check``). A
    structured observation gets its layout (``obs_keys``: the Dict keys to keep; all by
    default), and its leaves are checked here (:func:`asyncrl.spaces.obs_layout`).

    One probe per run: on Atari it builds the emulator's vector env. Its :class:`EnvInfo` also
    names the preset the env calls for, so whoever probed first hands it on (the CLI to
    :func:`asyncrl.config.preset` and :func:`asyncrl.train`, which then builds nothing more;
    :func:`probed` checks that a probe handed on is the run's)."""
    spec = env_spec(env_id)
    try:
        # Atari: the training env itself (the evaluation one needs OpenCV)
        env: Any = (
            make_vec_env(env_id, 1, 0, kwargs)
            if is_atari(spec)
            else gym.make(spec.id, **kwargs or {})
        )
    except UserError:
        raise
    except gym.error.DependencyNotInstalled as e:
        extra = next((x for x in ("mujoco", "box2d") if x in str(e).lower()), None)
        fix = (
            f"install the extra: pip install -c constraints.txt -e '.[{extra}]'"
            if extra
            else str(e)
        )
        raise UserError(f"--env: {env_id} needs a package that is not installed; {fix}") from None
    except Exception as e:  # an optional dependency of the env missing, say
        raise UserError(f"--env: cannot create {env_id!r}: {e}") from None
    source = None
    try:
        obs, reset_info = env.reset(seed=0)
        if is_atari(spec):
            obs = obs[0]
        else:  # action masks, in any convention, become info["action_mask"] (bool)
            source = mask_source(env, reset_info)
            if source is not None:
                env = ActionMasks(env)
                obs, reset_info = env.reset(seed=0)
        obs_space = getattr(env, "single_observation_space", env.observation_space)
        act_space = getattr(env, "single_action_space", env.action_space)
    except Exception as e:
        raise UserError(f"--env: {env_id} fails on reset: {type(e).__name__}: {e}") from None
    finally:
        env.close()
    action = ActionSpace.from_gym(act_space)
    if action is None:
        raise UserError(
            f"--env: {env_id} has a {type(act_space).__name__} action space; asyncrl takes "
            "Discrete, MultiDiscrete, MultiBinary and Box actions (map others to one of these "
            "with a gymnasium.ActionWrapper)"
        )
    if source is not None:
        check_probed_mask(env_id, source, action, reset_info["action_mask"])
        action = dataclasses.replace(action, masked=True)
    layout = obs_layout(obs_space, obs_keys, env_id)
    if layout is not None:
        try:
            layout.pack(obs)
        except ValueError as e:
            raise UserError(
                f"--env: {env_id} returned an observation that does not fit its "
                f"observation_space ({e}); fix the env or wrap it so the two agree"
            ) from None
        obs_shape, obs_dtype = (layout.size,), layout.dtype
    else:
        obs = np.asarray(obs)
        declared = obs_space.shape
        if obs.shape != declared or not np.can_cast(obs.dtype, obs_space.dtype, "same_kind"):
            raise UserError(
                f"--env: {env_id} returned an observation of shape {obs.shape} and dtype "
                f"{obs.dtype}, but its observation_space declares {declared} "
                f"{obs_space.dtype}; fix the env or wrap it so the two agree"
            )
        obs_shape, obs_dtype = tuple(obs_space.shape), np.dtype(obs_space.dtype).name
    return EnvInfo(
        env_id=env_id,
        obs_shape=obs_shape,
        obs_dtype=obs_dtype,
        action=action,
        reward_threshold=spec.reward_threshold,
        max_episode_steps=spec.max_episode_steps,
        frames_per_step=4 if is_atari(spec) else 1,  # the DeepMind action repeat
        reward_clip=atari.REWARD_CLIP if is_atari(spec) else 0.0,
        preset=preset_for(spec, action) or "cartpole",
        env_kwargs=tuple(sorted((kwargs or {}).items())),
        obs_keys=tuple(obs_keys),
        obs_layout=layout,
        # (every space obs_layout takes has a JSON form)
        obs_space=space_to_json(encoder_space(obs_space, obs_keys)),
    )


def probed(
    info: EnvInfo | None,
    env_id: str,
    kwargs: dict[str, Any] | None = None,
    obs_keys: tuple[str, ...] = (),
) -> EnvInfo:
    """``info``, the probe a caller made of ``env_id`` already, or (None) a probe of it now."""
    if info is None:
        return probe_env(env_id, kwargs, obs_keys)
    if info.env_id != env_id:
        raise UserError(f"info: a probe of {info.env_id!r}, but the run's env is {env_id!r}")
    if dict(info.env_kwargs) != (kwargs or {}):
        raise UserError(
            f"info: a probe of {env_id} with env kwargs {dict(info.env_kwargs)}, but the run "
            f"gives it {kwargs or {}}: probe it with the run's --env-kwargs"
        )
    if info.obs_keys != tuple(obs_keys):
        raise UserError(
            f"info: a probe of {env_id} with --obs-keys {' '.join(info.obs_keys) or '(all)'}, "
            f"but the run gives {' '.join(obs_keys) or '(all)'}: probe it with the run's --obs-keys"
        )
    return info


def env_seeds(seed: int, worker_id: int, incarnation: int, num_envs: int) -> tuple[int, list[int]]:
    """The worker's own seed and one seed per env, all from ``SeedSequence(seed)``.

    Every (worker, incarnation, env) gets a stream of its own: spawned sequences never collide,
    where ``seed * k + worker + i`` arithmetic made copy i of worker w and copy i - 1 of
    worker w + 1 play identical episodes. A restarted worker (a new incarnation) gets fresh
    streams, still a function of the seed.
    """
    root = np.random.SeedSequence([seed, worker_id, incarnation])
    worker_seq, *env_seqs = root.spawn(num_envs + 1)
    as_int = lambda s: int(s.generate_state(1, np.uint32)[0])  # noqa: E731
    return as_int(worker_seq), [as_int(s) for s in env_seqs]


def make_vec_env(
    env_id: str,
    num_envs: int,
    seed: int = 0,
    kwargs: dict[str, Any] | None = None,
    layout: ObsLayout | None = None,
    masked: bool = False,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the env, natively vectorized where the env offers it. With
    ``masked`` (the probe's :attr:`ActionSpace.masked`), each copy is wrapped in
    :class:`~asyncrl.actionmask.ActionMasks`, its masks in the info as ``action_mask``; with
    ``layout`` (:attr:`EnvInfo.obs_layout`), each env's structured observations are then packed
    into rows (:class:`asyncrl.spaces.PackObservation`). Either makes separate envs, since
    gymnasium's wrappers go on single envs."""
    spec = env_spec(env_id)
    if is_atari(spec):
        return atari.make_atari_vec_env(spec.id, num_envs, seed, **atari.env_overrides(kwargs))
    wrappers: list[Any] = [ActionMasks] if masked else []
    if layout is not None:
        wrappers.append(PackWrapper(layout))
    native = spec.vector_entry_point is not None and not wrappers
    env = gym.make_vec(
        spec.id,
        num_envs=num_envs,
        vectorization_mode="vector_entry_point" if native else "sync",
        wrappers=wrappers or None,
        **kwargs or {},
    )
    return _next_step_autoreset(env, env_id)


def _next_step_autoreset(env: gym.vector.VectorEnv, env_id: str) -> gym.vector.VectorEnv:
    """``env``, checked to autoreset in next-step mode (the worker's rollout relies on it)."""
    autoreset = env.metadata.get("autoreset_mode")
    if autoreset is not None and autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        raise RuntimeError(f"{env_id}: expected next-step autoreset, got {autoreset}")
    return env


#: the widest wave of evaluation episodes (played side by side, one batched forward pass a
#: step) on Atari, whose envs are whole emulators, and elsewhere, where 100 CartPoles step in
#: about the time of one and a confirmation's 100 episodes are one wave
EVAL_WAVE_ATARI = 16
EVAL_WAVE = 128


def make_eval_vec_env(
    env_id: str,
    episodes: int,
    seed: int = 0,
    kwargs: dict[str, Any] | None = None,
    layout: ObsLayout | None = None,
    masked: bool = False,
) -> gym.vector.VectorEnv:
    """Evaluation envs stepped together to play ``episodes`` episodes in waves (of at most
    :data:`EVAL_WAVE_ATARI` or :data:`EVAL_WAVE` envs): on Atari, copies of
    :func:`make_eval_env` (whole games, raw scores); elsewhere the training's vector env
    (natively vectorized where the env offers it: a tenth of the cost a step of separate
    envs has on CartPole). ``layout``: the observations packed into rows, as training's are
    (:func:`make_vec_env`)."""
    wave = eval_wave(env_id, episodes)
    if not is_atari(env_spec(env_id)):
        return make_vec_env(env_id, wave, seed, kwargs, layout, masked)
    fns = [lambda: make_eval_env(env_id, seed, None, kwargs)] * wave
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def eval_wave(env_id: str, episodes: int) -> int:
    """How many of ``episodes`` evaluation episodes play together (:func:`make_eval_vec_env`'s
    envs): a wave, which :func:`asyncrl.policy.play_episodes` plays to its last episode's end
    before the next."""
    return min(episodes, EVAL_WAVE_ATARI if is_atari(env_spec(env_id)) else EVAL_WAVE)


def reset_vec_env(env: gym.vector.VectorEnv, env_seeds: list[int]) -> tuple[Any, dict]:
    """Reset with one seed per copy where the vector env takes a list (SyncVectorEnv); a
    natively vectorized env with one generator for the batch gets the first seed. The
    observations and the info (where an env's action masks are)."""
    if isinstance(env, gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv):
        seeds: list[int | None] = list(env_seeds)
        return env.reset(seed=seeds)
    return env.reset(seed=env_seeds[0])


def dump_vec_env(env: gym.vector.VectorEnv, env_id: str | None = None) -> bytes | None:
    """The vector env's whole state as bytes for a checkpoint, or None if it cannot be pickled
    (an emulator in C++, say: such a worker resumes with fresh env state).

    SyncVectorEnv keeps the factory functions it was built from (often lambdas, which pickle
    cannot take); they are not needed once the envs exist, so they are left out. With
    ``env_id``, a state that the checkpoint's loader would refuse (it names a function, as
    MiniGrid's mission space does: :func:`asyncrl.checkpoint.check_env_state`) is left out
    too, rather than making the whole checkpoint one that cannot be resumed.
    """
    fns = getattr(env, "env_fns", None)
    try:
        if fns is not None:
            setattr(env, "env_fns", None)  # noqa: B010
        data = pickle.dumps(env)
    except Exception:
        return None
    finally:
        if fns is not None:
            setattr(env, "env_fns", fns)  # noqa: B010
    if env_id is not None:
        from asyncrl.checkpoint import check_env_state

        try:
            check_env_state(data, env_id)
        except Exception:
            return None
    return data


def make_eval_env(
    env_id: str,
    seed: int,
    render_mode: str | None = None,
    kwargs: dict[str, Any] | None = None,
    layout: ObsLayout | None = None,
    masked: bool = False,
) -> gym.Env:
    """One env for evaluation (and video): whole games and raw scores on Atari, FIRE pressed
    after a lost life (:class:`asyncrl.atari.FireReset`). With ``masked``, its action masks in
    the info (:class:`~asyncrl.actionmask.ActionMasks`); with ``layout``, its observations then
    packed into rows, as training's are (:func:`make_vec_env`)."""
    spec = env_spec(env_id)
    if is_atari(spec):
        return atari.make_atari_env(
            spec.id,
            seed,
            render_mode=render_mode,
            fire_after_lost_life=True,
            **atari.env_overrides(kwargs),
        )
    # not every env takes a render_mode argument: pass it only when asked for
    kw = dict(kwargs or {})
    if render_mode is not None:
        kw["render_mode"] = render_mode
    env = gym.make(spec.id, **kw)
    env = ActionMasks(env) if masked else env
    return env if layout is None else PackObservation(env, layout)
