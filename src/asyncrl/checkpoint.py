"""Checkpoints: complete or absent, never half-written (the Dopamine checkpointer's rule).

A checkpoint is one file, ``RUN_DIR/checkpoint.ckpt`` (see :class:`asyncrl.rundir.RunDir`): a
header (magic, format version, payload length, SHA-256 of the payload) and a pickled payload of
plain Python and numpy objects. It is written to a temporary file, flushed to disk, and renamed
over the previous one, so a crash at any moment leaves either the old checkpoint or the new one.
Loading checks the header, the length and the digest, so a truncated or corrupted file is
reported as such, never half-loaded.

A checkpoint is data, not code. The digest tells a damaged file from a whole one, not a forged
one from a real one, and unpickling calls whatever a pickle names: ``--resume`` of a run
directory from elsewhere must not run code. So loading builds only what a real checkpoint holds:

* the payload, through an exact allow-list (:data:`PAYLOAD_GLOBALS`): the snapshots of
  :mod:`asyncrl.messages`, numpy arrays and dtypes, a few builtin containers. No PyTorch
  tensors: they unpickle through ``torch.load(..., weights_only=False)``, which would open the
  door again; the payload holds numpy arrays instead.
* each worker's env state (``"envs"``: the bytes of :func:`asyncrl.envs.dump_vec_env`, a pickle
  of the vector env that the worker unpickles as it starts), checked before any worker sees it
  by a dry run that builds nothing (:func:`check_env_state`): numpy's array and random-generator
  pieces by exact name (:data:`ENV_GLOBALS`), and otherwise *classes* -- never functions, never
  an attribute path -- of the env libraries (:data:`ENV_PACKAGES`) and of the package that
  registers the run's env. A class still runs its own constructor or ``__setstate__`` with the
  file's arguments, as it does when the env is made: a forged file can build what those
  packages build, not call ``os.system``.

Any other name is refused with one line, and nothing is built from it.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncrl.errors import UserError
from asyncrl.rundir import RunDir, write_atomically

MAGIC = b"ASYNCRL-CKPT"
FORMAT_VERSION = 2  # 2: typed global snapshot, algorithm-owned worker state
_HEADER = struct.Struct(f"<{len(MAGIC)}sIQ32s")  # magic, version, payload length, sha256


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically to ``run_dir/checkpoint.ckpt``; return the path."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(data), hashlib.sha256(data).digest())
    path = RunDir(run_dir).checkpoint
    write_atomically(path, lambda f: f.write(header + data))
    return path


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    """Read and verify the checkpoint of ``run_dir``; a clear :class:`UserError` otherwise,
    also for a file that names anything a checkpoint does not hold (see the module's notes)."""
    path = RunDir(Path(run_dir)).checkpoint
    if not Path(run_dir).is_dir():
        raise UserError(f"--resume: run directory {run_dir} does not exist")
    if not path.is_file():
        raise UserError(
            f"--resume: {run_dir} has no {path.name} (the run ended or was killed before "
            "its first checkpoint); start a new run instead"
        )
    blob = path.read_bytes()
    if len(blob) < _HEADER.size:
        raise UserError(f"--resume: {path} is truncated ({len(blob)} bytes); it cannot be resumed")
    magic, version, length, digest = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise UserError(f"--resume: {path} is not an asyncrl checkpoint (corrupt header)")
    if version != FORMAT_VERSION:
        raise UserError(
            f"--resume: {path} has checkpoint format {version}; this asyncrl reads format "
            f"{FORMAT_VERSION}"
        )
    data = blob[_HEADER.size :]
    if len(data) != length:
        raise UserError(
            f"--resume: {path} is truncated ({len(data)} of {length} payload bytes); "
            "it cannot be resumed"
        )
    if hashlib.sha256(data).digest() != digest:
        raise UserError(f"--resume: {path} is corrupt (checksum mismatch); it cannot be resumed")
    try:
        payload = _Restricted(io.BytesIO(data), _payload_allows).load()
        if not isinstance(payload, dict):
            raise pickle.UnpicklingError(f"a {type(payload).__name__} where a dict belongs")
        env_id = _env_id(payload)
        for state in _env_states(payload):
            check_env_state(state, env_id)
    except Refused as e:
        raise UserError(
            f"--resume: {path} is not trusted: asyncrl refuses to build {e.name} from it "
            "(a checkpoint is data, not code); start a new run"
        ) from None
    except Exception as e:  # a digest match makes this unlikely: a file from another build
        raise UserError(f"--resume: {path} cannot be decoded ({type(e).__name__}: {e})") from None
    return payload


# ---------------------------------------------------------------------- what loading may build
_NUMPY_ARRAYS = frozenset(
    {("numpy", "ndarray"), ("numpy", "dtype")}
    # the array reconstructors, by numpy 2's (numpy._core) and numpy 1's (numpy.core) names
    | {(f"numpy.{c}.multiarray", n) for c in ("_core", "core") for n in ("_reconstruct", "scalar")}
    | {(f"numpy.{c}.numeric", "_frombuffer") for c in ("_core", "core")}
)
_CONTAINERS = frozenset(
    {("builtins", n) for n in ("set", "frozenset", "complex", "slice", "range", "bytearray")}
    | {("collections", "OrderedDict")}
)

#: the exact globals a payload may name: what ``trainer.write_checkpoint`` writes is the config
#: and model-spec dicts, a GlobalSnapshot, the workers' state dicts and the monitor's dict
PAYLOAD_GLOBALS = frozenset(
    {("asyncrl.messages", "GlobalSnapshot"), ("asyncrl.messages", "WorkerSnapshot")}
    | _NUMPY_ARRAYS
    | _CONTAINERS
)

_NUMPY_RANDOM = frozenset(
    {
        ("numpy.random._pickle", n)
        for n in ("__bit_generator_ctor", "__generator_ctor", "__randomstate_ctor")
    }
    | {
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._pcg64", "PCG64DXSM"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._philox", "Philox"),
        ("numpy.random._sfc64", "SFC64"),
        ("numpy.random._generator", "Generator"),
        ("numpy.random.mtrand", "RandomState"),
        ("numpy.random.bit_generator", "SeedSequence"),
        ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    }
)

#: the exact globals an env state may name besides the classes of :data:`ENV_PACKAGES` (numpy
#: is here by name: it has classes an env never pickles, such as memmap, which writes files)
ENV_GLOBALS = _NUMPY_ARRAYS | _CONTAINERS | _NUMPY_RANDOM

#: packages whose classes an env state may build: Gymnasium and the env families asyncrl runs
#: (its own Atari wrappers included); the package that registers the run's env is added to them
ENV_PACKAGES = ("gymnasium", "ale_py", "minatar", "mujoco", "Box2D", "asyncrl")


class Refused(pickle.UnpicklingError):
    """A pickle names a global outside its allow-list."""

    def __init__(self, module: str, name: str):
        super().__init__(f"refuses to build {module}.{name}")
        self.name = f"{module}.{name}"


class _Restricted(pickle.Unpickler):
    """Looks up only the globals ``allows(module, name, found)`` admits: asked first with
    ``found`` None (nothing imported yet), then with the global itself."""

    def __init__(self, file: io.BytesIO, allows: Callable[[str, str, Any], bool]):
        super().__init__(file)
        self.allows = allows

    def find_class(self, module: str, name: str) -> Any:
        if not self.allows(module, name, None):
            raise Refused(module, name)
        found = super().find_class(module, name)
        if not self.allows(module, name, found):
            raise Refused(module, name)
        return found


def _payload_allows(module: str, name: str, found: Any) -> bool:
    return (module, name) in PAYLOAD_GLOBALS


def _env_allows(packages: tuple[str, ...]) -> Callable[[str, str, Any], bool]:
    def allows(module: str, name: str, found: Any) -> bool:
        if (module, name) in ENV_GLOBALS:
            return True
        # a class of an env package by its own name: a dotted name walks attributes, from a
        # class to the modules its package imported (os, importlib...)
        ours = any(module == p or module.startswith(p + ".") for p in packages)
        return ours and "." not in name and (found is None or isinstance(found, type))

    return allows


class _Stub:
    """What the dry run builds in place of everything: takes any call, state and item."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass


class _DryRun(_Restricted):
    """Checks every global a pickle names and builds stubs only. The opcodes alone say which
    globals are looked up (a name a stub would have had to compute fails the dry run), so the
    worker's own unpickling of the same bytes looks up these and no others."""

    def find_class(self, module: str, name: str) -> Any:
        super().find_class(module, name)
        return _Stub


def check_env_state(data: bytes, env_id: str | None) -> None:
    """Raise :class:`Refused` if the env state ``data`` (a pickle of the vector env of
    ``env_id``) names anything but numpy's arrays and generators and the classes of the env
    packages; build nothing."""
    allows = _env_allows(ENV_PACKAGES + _env_package(env_id))
    _DryRun(io.BytesIO(data), allows).load()


def _env_package(env_id: str | None) -> tuple[str, ...]:
    """The top-level package of the env's registered entry point (``my_envs`` for
    ``my_envs.core:MyEnv``). It is read from Gymnasium's registry, not from the file: an id's
    ``module:`` prefix names the module to import, which may register any entry point."""
    if not env_id:
        return ()
    from asyncrl.envs import env_spec

    try:
        entry = env_spec(env_id).entry_point
    except Exception:  # an id that no longer resolves: the trainer reports it
        return ()
    module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    top = str(module or "").split(".")[0]
    return (top,) if top and top not in ("builtins", "__main__") else ()


def _env_states(payload: dict[str, Any]) -> list[bytes]:
    """The workers' env states: ``payload["workers"][worker]["envs"]``."""
    workers = payload.get("workers")
    if not isinstance(workers, dict):
        return []
    return [
        bytes(s["envs"])
        for s in workers.values()
        if isinstance(s, dict) and isinstance(s.get("envs"), bytes | bytearray)
    ]


def _env_id(payload: dict[str, Any]) -> str | None:
    config = payload.get("config")
    env = config.get("env") if isinstance(config, dict) else None
    return env if isinstance(env, str) else None
