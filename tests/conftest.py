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
# Ray starts its worker processes at nice 15 (worker_niceness). scripts/test runs the Ray tests
# in one process beside the other tests: there a learning test's workers at nice 0 left the Ray
# actors about 5% of a core each, and the Ray tests crawled. At 0 they share the cores fairly.
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture
def run_dir(tmp_path):
    """A run directory path that does not exist yet."""
    return tmp_path / "run"


@pytest.fixture
def seed():
    """The seed the learning tests train with: 0, or ASYNCRL_TEST_SEED, which is how each
    learning test's docstring measured that its assertion holds on other seeds too
    (``ASYNCRL_TEST_SEED=3 pytest tests/test_learning.py``): a fixed seed reproduces a run only
    on the same CPU, so an assertion must hold on seeds it was not tuned on."""
    return int(os.environ.get("ASYNCRL_TEST_SEED", "0"))


def pytest_collection_modifyitems(items):
    """The longest work first, so that no process runs alone at the end under scripts/test's
    pytest-xdist (which hands tests out in this order): the Ray module (one unit: its tests
    share a cluster, about a quarter of the suite's time), then the learning tests (the longest
    each, longest first in their file), then the rest, each in file order."""

    def rank(item):
        if item.get_closest_marker("xdist_group") is not None:
            return 0
        return 1 if item.path.name == "test_learning.py" else 2

    items.sort(key=rank)  # stable: file order within each rank
