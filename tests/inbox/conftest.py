from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.inbox.store import InboxStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "tether.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[InboxStore]:
    with InboxStore(db_path) as s:
        yield s


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real state directory from a test."""
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
