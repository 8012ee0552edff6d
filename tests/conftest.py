from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


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
