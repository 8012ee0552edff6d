"""What a sans-IO protocol translator hands its driver: typed actions, never I/O.

The Codex, pi and ACP adapters each split into a translator (the CLI's messages in, the
actions below out; no process, no clock, no files) and the one driver that performs the
actions (:mod:`tether.runtime.child.adapters.driver`). A translator's methods return a list of
actions, in order:

- :class:`Send`: one JSON message for the CLI's stdin;
- :class:`Show`: one display event for the wire (raw, kebab-case keys; the presenter
  normalizes it);
- :class:`Started`: the hand-shake is over, turns may begin (``session`` is the CLI's
  session or thread id, recorded for resume);
- :class:`Ended`: the CLI's turn is over: the wire stop reason, the turn's usage
  (summed over its model calls), an error when it failed;
- :class:`Ask`: the CLI asks a permission (or shows a dialog): the driver takes the
  :class:`~tether.agent.desk.Request` to the run's approval desk and, once it is decided,
  hands the :class:`~tether.agent.desk.Verdict` back to the translator's ``answered``
  with the ``token`` the translator chose, whose actions answer the CLI in its protocol;
- :class:`Withdraw`: the CLI took back a request it asked (Claude Code's
  ``control_cancel_request``): the driver stops waiting for it;
- :class:`Broken`: the CLI cannot go on (a failed hand-shake): the run fails with it.

Translators are total: any dict (and :class:`~tether.runtime.child.adapters.base.BadLine`)
they are given yields actions, never an exception. :func:`text_of`, :func:`count`, :func:`mapping`
and :func:`field` read untrusted JSON values defensively.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from tether.agent.desk import Request
from tether.agent.usage import Usage

__all__ = [
    "Action",
    "Ask",
    "Broken",
    "Ended",
    "Send",
    "Show",
    "Started",
    "Withdraw",
    "count",
    "field",
    "mapping",
    "text_of",
]

MAX_SAFE_INT: Final = 2**53 - 1


class Send(NamedTuple):
    message: dict[str, Any]


class Show(NamedTuple):
    event: dict[str, Any]


class Started(NamedTuple):
    session: str | None = None


class Ended(NamedTuple):
    stop_reason: str
    usage: Usage
    error: str | None = None


class Ask(NamedTuple):
    request: Request
    token: Any  # the translator's handle on the request (hashable), given back with the verdict


class Withdraw(NamedTuple):
    token: Any


class Broken(NamedTuple):
    reason: str


Action = Send | Show | Started | Ended | Ask | Withdraw | Broken


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def field(value: object, *path: str) -> object:
    """The member at ``path`` inside nested objects (None where one is missing)."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def text_of(value: object) -> str:
    """A string member as-is; anything else is ''."""
    return value if isinstance(value, str) else ""


def count(value: object) -> int:
    """A token count: a non-negative JSON integer, else 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return min(max(value, 0), MAX_SAFE_INT)
