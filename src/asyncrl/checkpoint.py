"""Checkpoints: complete or absent, never half-written (the Dopamine checkpointer's rule).

A checkpoint is one file, ``RUN_DIR/checkpoint.ckpt`` (see :class:`asyncrl.rundir.RunDir`): a
header (magic, format version, payload
length, SHA-256 of the payload) and a pickled payload of plain Python and numpy objects. It is
written to a temporary file, flushed to disk, and renamed over the previous one, so a crash at
any moment leaves either the old checkpoint or the new one. Loading checks the header, the
length and the digest, so a truncated or corrupted file is reported as such, never half-loaded.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
from pathlib import Path
from typing import Any

from asyncrl.errors import UserError
from asyncrl.rundir import RunDir

MAGIC = b"ASYNCRL-CKPT"
FORMAT_VERSION = 2  # 2: typed global snapshot, algorithm-owned worker state
_HEADER = struct.Struct(f"<{len(MAGIC)}sIQ32s")  # magic, version, payload length, sha256


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically to ``run_dir/checkpoint.ckpt``; return the path."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(data), hashlib.sha256(data).digest())
    path = RunDir(run_dir).checkpoint
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    """Read and verify the checkpoint of ``run_dir``; a clear :class:`UserError` otherwise."""
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
        return pickle.loads(data)
    except Exception as e:  # a digest match makes this unlikely: a file from another build
        raise UserError(f"--resume: {path} cannot be decoded ({type(e).__name__}: {e})") from None
