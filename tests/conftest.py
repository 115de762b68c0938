import os
import secrets

import pytest

# Every worker and the test process itself: one thread of compute each.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray clusters in the tests run with token authentication, as the README tells cluster users
# to: every node and the driver share the secret. Ray reads the mode when it is first imported,
# so it is set here, before any test module imports Ray.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


@pytest.fixture
def run_dir(tmp_path):
    """A run directory path that does not exist yet."""
    return tmp_path / "run"
