"""A minimal TensorBoard scalar writer: TFRecord-framed ``Event`` protos, written by hand.

Why not ``torch.utils.tensorboard``: importing it (tensorboard + protobuf) costs about a second
of CPU, which is a tenth of a whole CartPole run here. Scalars need three tiny messages, so we
encode them directly; TensorBoard reads the files like any other (tests read them back with
TensorBoard's own ``EventAccumulator``).
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, *, summary: bytes = b"", file_version: str = "") -> bytes:
    msg = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    if file_version:
        msg += _len_field(3, file_version.encode())
    if summary:
        msg += _len_field(5, summary)
    return msg


class ScalarWriter:
    """Appends scalar summaries to ``events.out.tfevents.*`` in ``log_dir``."""

    def __init__(self, log_dir: str | Path):
        path = Path(log_dir)
        path.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.asyncrl"
        self._f = open(path / name, "ab")  # noqa: SIM115 (lives as long as the writer)
        self._write(_event(time.time(), 0, file_version="brain.Event:2"))

    def _write(self, record: bytes) -> None:
        header = struct.pack("<Q", len(record))
        self._f.write(header + struct.pack("<I", _masked_crc(header)))
        self._f.write(record + struct.pack("<I", _masked_crc(record)))

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        val = _len_field(1, tag.encode()) + b"\x15" + struct.pack("<f", float(value))
        summary = _len_field(1, val)
        self._write(_event(time.time() if wall_time is None else wall_time, step, summary=summary))

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()
