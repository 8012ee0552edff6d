"""Fixtures for the child tests (helpers live in child_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from child_helpers import Child


@pytest.fixture
def make_child(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Build children in private run dirs under the test's tmp dir; kill leftovers."""
    children: list[Child] = []

    def make(**kwargs: Any) -> Child:
        root = tmp_path / f"run{len(children)}"
        root.mkdir(mode=0o700)
        child = Child(root, **kwargs)
        children.append(child)
        return child

    yield make
    for child in children:
        child.kill()
