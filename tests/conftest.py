from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# The daemon, fleet and dashboard fixtures (short_tmp, daemon_env, daemon, agentd, dashboard)
# and tool gates (tool_gate).
pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.agentd",
    "tests.support.dashboard",
    "tests.support.gates",
]

# A suite started as a background job of a script (`scripts/check &`, CI wrappers) inherits
# SIGINT ignored, and so would every tether process a test starts: Ctrl-C sent by a test
# would then do nothing and the test hang. Handled here, SIGINT is default in children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def tether_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose state lives in the test's tmp dir (never the user's home)."""
    env = dict(os.environ)
    env["TETHER_HOME"] = str(tmp_path / "home")
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "xdg-run")
    env.pop("TETHER_SOCKET", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def python() -> str:
    return sys.executable
