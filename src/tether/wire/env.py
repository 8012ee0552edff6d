"""The environment that points a child at its run: built by parents, read by children.

The spec's names are ``FEN_WIRE_CONTROL_PATH``, ``FEN_WIRE_EVENT_PATH``, ``FEN_WIRE_RUN_ID``
and ``FEN_WIRE_DEADLINE`` (Unix seconds); tether also writes and reads the same names with
``TETHER_WIRE_``. A parent that is itself a child must not hand its own wire settings (a
deadline!) down: :func:`without_wire_env` drops them from what a child inherits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["WIRE_PREFIXES", "read_wire_env", "wire_env", "without_wire_env"]

WIRE_PREFIXES: Final = ("FEN_WIRE_", "TETHER_WIRE_")


def wire_env(
    *, control_path: str, event_path: str, run_id: str, deadline: int | None
) -> dict[str, str]:
    """The wire variables for one run, under both prefixes."""
    values = {"CONTROL_PATH": control_path, "EVENT_PATH": event_path, "RUN_ID": run_id}
    if deadline is not None:
        values["DEADLINE"] = str(deadline)
    return {prefix + key: value for prefix in WIRE_PREFIXES for key, value in values.items()}


def read_wire_env(env: Mapping[str, str], name: str) -> str | None:
    """``FEN_WIRE_<name>``, else ``TETHER_WIRE_<name>`` (empty counts as unset)."""
    for prefix in WIRE_PREFIXES:
        value = env.get(prefix + name)
        if value:
            return value
    return None


def without_wire_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any wire variable (what a child may inherit from its parent)."""
    return {key: value for key, value in env.items() if not key.startswith(WIRE_PREFIXES)}
