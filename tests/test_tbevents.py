import pytest

from asyncrl.tbevents import ScalarWriter, crc32c


def test_crc32c_known_vector():
    assert crc32c(b"123456789") == 0xE3069283


def test_tensorboard_reads_what_we_write(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    w = ScalarWriter(tmp_path)
    for step, v in [(10, 1.5), (20, 2.5), (35, -1.0)]:
        w.add_scalar("episode/return", v, step)
    w.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    events = acc.Scalars("episode/return")
    assert [(e.step, e.value) for e in events] == [(10, 1.5), (20, 2.5), (35, -1.0)]
