"""Test-wide settings: a Hypothesis profile for CI with no deadline (the machine is shared), and
a data folder of the test session's own, so that nothing a test starts (a server's snapshots of
a PostgreSQL store, a default store) writes into the user's ``~/.local/share/treadle``."""

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

_DATA_HOME = tempfile.mkdtemp(prefix="treadle-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME  # inherited by every child process a test starts
atexit.register(shutil.rmtree, _DATA_HOME, ignore_errors=True)
