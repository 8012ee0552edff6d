from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def tether_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs, the index and the inbox rows live in the test's tmp dir."""
    home = tmp_path / "home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("FEN_WIRE_RUN_ID", raising=False)
    monkeypatch.delenv("TETHER_SUBAGENT_DEPTH", raising=False)
    return home
