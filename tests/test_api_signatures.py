"""Every way to start a run takes the one ``SpawnOptions`` (and its fields by keyword):
tether.spawn, tether.run, tether.open_run, and spawn_remote; a new option is one field of
the Struct, never a keyword written again in each signature."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import tether
from tether.daemon.fleet.params import SpawnParams
from tether.runtime.parent.options import SpawnOptions, Supervision, split_fields


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("function", [tether.run, tether.open_run], ids=["run", "open_run"])
def test_blocking_faces_take_what_spawn_takes(function: Callable[..., Any]) -> None:
    assert _parameters(function) == _parameters(tether.spawn)
    names = [name for name, _ in _parameters(function)]
    assert names == ["task", "options", "fields"]  # no option spelt out a second time


def test_spawn_remote_takes_the_same_options() -> None:
    parameters = inspect.signature(tether.spawn_remote).parameters
    assert parameters["options"].annotation in ("SpawnOptions | None", SpawnOptions | None)
    assert not set(parameters) & set(SpawnOptions.__struct_fields__)


def test_the_daemons_spawn_is_the_same_struct() -> None:
    assert issubclass(SpawnParams, SpawnOptions)
    assert set(SpawnOptions.__struct_fields__) <= set(SpawnParams.__struct_fields__)


def test_every_option_is_taken_by_keyword_and_sorted() -> None:
    default = SpawnOptions()
    fields = {name: getattr(default, name) for name in SpawnOptions.__struct_fields__}
    options, supervision = split_fields(None, {**fields, "record": False})
    assert options == SpawnOptions()
    assert supervision == Supervision(record=False)


def test_a_misspelt_option_is_refused_before_any_child_starts() -> None:
    with pytest.raises(TypeError, match="provdier"):
        tether.run("hello", provdier="scripted")
    with pytest.raises(TypeError, match="provdier"):
        tether.open_run("hello", provdier="scripted")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308, 0, -1, True, "5"])
def test_a_bad_duration_is_refused_by_the_struct(value: Any) -> None:
    with pytest.raises(ValueError, match="deadline_s"):
        tether.run("hello", provider="scripted", deadline_s=value)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"name": "a", "deadline_s": value}, SpawnParams)
