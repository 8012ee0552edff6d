"""Every number a user or client gives passes one rule per kind (``tether.numbers``)."""

from __future__ import annotations

import argparse
import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.numbers import (
    MAX_SECONDS,
    PORT,
    SECONDS,
    SECONDS_OR_ZERO,
    PositiveSeconds,
    Seconds,
    count,
    seconds_problem,
)

KINDS = [SECONDS, SECONDS_OR_ZERO, PORT, count(), count(0, 10)]


@pytest.mark.parametrize("kind", KINDS, ids=repr)
@given(text=st.one_of(st.text(max_size=30), st.floats().map(repr), st.integers().map(str)))
def test_an_option_is_a_number_in_range_or_a_usage_error(kind: object, text: str) -> None:
    assert callable(kind)
    try:
        value = kind(text)
    except argparse.ArgumentTypeError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert repr(text) in message
        assert "\n" not in message
        return
    assert math.isfinite(value)
    assert kind.low <= value <= kind.high  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e308", "0", "-1", " ", "1e400"])
def test_nonsense_seconds(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="number of seconds"):
        SECONDS(text)


def test_the_edges() -> None:
    assert SECONDS("0.001") == 0.001
    assert SECONDS(str(MAX_SECONDS)) == MAX_SECONDS
    assert SECONDS_OR_ZERO("0") == 0
    assert PORT("65535") == 65535
    with pytest.raises(argparse.ArgumentTypeError):
        PORT("65536")
    with pytest.raises(argparse.ArgumentTypeError):
        PORT("80.5")


@given(st.floats() | st.integers(min_value=-(2**70), max_value=2**70))
def test_the_msgspec_types_and_seconds_problem_agree(value: float) -> None:
    for kind, positive in ((PositiveSeconds, True), (Seconds, False)):
        try:
            msgspec.convert(value, kind)
        except msgspec.ValidationError:
            assert seconds_problem(value, positive=positive) is not None
        else:
            assert seconds_problem(value, positive=positive) is None
