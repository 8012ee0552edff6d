"""Fixtures for the RESP adapter tests (helpers live in helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .helpers import AGENT, AdapterChild, write_program


@pytest.fixture
def make_child(tmp_path: Path) -> Iterator[Callable[..., AdapterChild]]:
    """Adapter children in private run dirs under the test's tmp dir; kill leftovers."""
    children: list[AdapterChild] = []

    def make(command: Sequence[str] = ("bash", str(AGENT)), **kwargs: Any) -> AdapterChild:
        root = tmp_path / f"run{len(children)}"
        root.mkdir(mode=0o700)
        child = AdapterChild(root, command, **kwargs)
        children.append(child)
        return child

    yield make
    for child in children:
        child.kill()


@pytest.fixture
def program(tmp_path: Path) -> Callable[[str, str], list[str]]:
    """Write a bash program (tether.sh and the spec's writer loaded); returns its argv."""
    folder = tmp_path / "programs"
    folder.mkdir(mode=0o700)

    def write(name: str, body: str) -> list[str]:
        return write_program(folder, name, body)

    return write
