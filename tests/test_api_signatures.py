"""tether.run and tether.open_run take exactly spawn's keywords, spelled out (no
``**options``), so a misspelt option fails the type checker and the call alike."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import tether


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize("function", [tether.run, tether.open_run], ids=["run", "open_run"])
def test_blocking_faces_take_spawns_keywords(function: Callable[..., Any]) -> None:
    assert _parameters(function) == _parameters(tether.spawn)
    kinds = {p.kind for p in inspect.signature(function).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds


def test_a_misspelt_option_is_refused_before_any_child_starts() -> None:
    with pytest.raises(TypeError, match="provdier"):
        tether.run("hello", provdier="scripted")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="provdier"):
        tether.open_run("hello", provdier="scripted")  # type: ignore[call-arg]
