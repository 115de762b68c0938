import os

import pytest

# Every worker and the test process itself: one thread of compute each.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def run_dir(tmp_path):
    """A run directory path that does not exist yet."""
    return tmp_path / "run"
