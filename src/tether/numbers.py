"""The numbers a user or a client gives tether: seconds, ports, sizes and counts.

Theory of operation: a number is checked once, where it enters, by one rule per kind, so a
NaN, an infinity, ``1e308`` or port 99999 is a usage error (exit 2) on the command line and
``invalid_params`` at the daemon, never an internal error deep inside (``math.ceil(nan)``,
an integer too large for SQLite, ``bind()`` refusing the port) or a child that fails later.

- :class:`Number` is the ``type=`` of every numeric option of every ``tether`` command:
  ``SECONDS`` (a positive duration), ``SECONDS_OR_ZERO``, ``PORT``, ``count(low, high)``.
- :data:`Seconds` and :data:`PositiveSeconds` are the same bounds as msgspec constraints,
  for the daemon's params.
- :func:`seconds_problem` is the same rule for the parent API's arguments.

Every duration is at most :data:`MAX_SECONDS` (a year): enough for any deadline or wait,
and small enough that ``now + s`` stays an exact, finite number of milliseconds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Annotated, Final

import msgspec

MAX_SECONDS: Final = 366 * 24 * 3600
MAX_PORT: Final = 65535
MAX_COUNT: Final = 2**53 - 1  # the largest integer JSON peers agree on

Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]


def seconds_problem(value: float, *, positive: bool = True) -> str | None:
    """Why ``value`` is not a duration (None when it is one): not finite, negative (or zero
    when ``positive``), or over :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r} is not a number of seconds"
    low = "more than 0" if positive else "at least 0"
    if not math.isfinite(value) or value < 0 or (positive and value == 0) or value > MAX_SECONDS:
        return f"{value!r} is not a number of seconds {low} and at most {MAX_SECONDS}"
    return None


class Number:
    """An argparse ``type=``: the option's text as an ``int`` or a finite ``float`` between
    ``low`` and ``high`` (``low`` excluded with ``above``), else a usage error naming the
    option and the range (argparse prints it in one line and exits 2)."""

    def __init__(
        self,
        kind: type[int] | type[float],
        low: float,
        high: float,
        *,
        above: bool = False,
        noun: str = "",
    ) -> None:
        self.kind = kind
        self.low = low
        self.high = high
        self.above = above
        self.__name__ = noun or ("number" if kind is float else "whole number")

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {self.__name__}") from None
        if math.isfinite(value) and self._in_range(value):
            return value
        raise argparse.ArgumentTypeError(f"{text!r} is not {self.describe()}")

    def _in_range(self, value: float) -> bool:
        return (value > self.low if self.above else value >= self.low) and value <= self.high

    def describe(self) -> str:
        low = f"more than {_show(self.low)}" if self.above else f"at least {_show(self.low)}"
        return f"a {self.__name__} {low} and at most {_show(self.high)}"

    def __repr__(self) -> str:
        return f"Number({self.kind.__name__}, {self.low!r}, {self.high!r}, above={self.above})"


def _show(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


SECONDS: Final = Number(float, 0, MAX_SECONDS, above=True, noun="number of seconds")
SECONDS_OR_ZERO: Final = Number(float, 0, MAX_SECONDS, noun="number of seconds")
PORT: Final = Number(int, 0, MAX_PORT)


def count(low: int = 1, high: int = MAX_COUNT) -> Number:
    """An argparse ``type=`` for a whole number from ``low`` to ``high``."""
    return Number(int, low, high)


REPLICAS: Final = count(1, 5)  # of a NATS stream or bucket


def from_env(env: Mapping[str, str], name: str, kind: Number, default: float) -> float:
    """The number in environment variable ``name`` (``default`` when unset or empty), by
    the rule of ``kind``; a ``ValueError`` naming the variable otherwise."""
    text = env.get(name, "")
    if not text:
        return default
    try:
        return kind(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"${name}: {exc}") from None
