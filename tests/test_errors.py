"""One exception tree: every exception class tether defines derives from TetherError,
and the tree drawn in tether.errors names each of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import tether
from tether import errors


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if info.name.endswith("__main__"):
            continue  # running it runs the CLI
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


CLASSES = _exception_classes()


def test_every_exception_is_a_tether_error() -> None:
    outside = sorted(
        name for name, cls in CLASSES.items() if not issubclass(cls, errors.TetherError)
    )
    assert outside == [], "derive these from a node of tether.errors"


def test_the_drawn_tree_names_every_exception() -> None:
    doc = errors.__doc__ or ""
    drawn = set(re.findall(r"^[ │├└─]*(\w+)", doc, flags=re.MULTILINE))  # each line's name
    missing = sorted(name for name in CLASSES if name.rpartition(".")[2] not in drawn)
    assert missing == [], "draw these in tether.errors' docstring"


def test_the_walk_finds_exceptions_everywhere() -> None:
    # the checks above are only as good as the walk
    assert "tether.daemon.rpc.client.DaemonUnavailable" in CLASSES
    assert "tether.agent.scripted.ScriptError" in CLASSES
    assert "tether.errors.SpawnError" in CLASSES


def test_built_in_bases_are_kept() -> None:
    from tether.daemon.fleet.registry import AgentNotFound

    assert issubclass(AgentNotFound, KeyError)
    assert issubclass(errors.ControlRefused, ValueError)
