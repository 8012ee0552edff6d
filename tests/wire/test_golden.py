"""Golden lines: every line classifies exactly as labelled (ours and the reference's)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from tests.conftest import SHARED
from tether.wire import Rejection, decode, encode, tag_of

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = SHARED / "reference" / "fen-wire"


def _valid_lines(path: Path, direction: str) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(direction, line) for line in lines if line.strip()]


def _invalid_lines(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(raw)
        out.append((entry["direction"], entry["code"], entry["line"]))
    return out


VALID = _valid_lines(FIXTURES / "events.jsonl", "event") + _valid_lines(
    FIXTURES / "controls.jsonl", "control"
)
INVALID = _invalid_lines(FIXTURES / "invalid.jsonl")
REF_VALID = _valid_lines(REFERENCE / "events.jsonl", "event") + _valid_lines(
    REFERENCE / "controls.jsonl", "control"
)
REF_INVALID = _invalid_lines(REFERENCE / "invalid.jsonl")


def _check_valid(direction: str, line: str) -> None:
    expected = json.loads(line)["type"]
    message = decode(line, direction)
    assert not isinstance(message, Rejection), message
    assert tag_of(type(message)) == expected
    # bytes and str agree, and what we encode decodes to the same message
    assert decode(line.encode(), direction) == message
    again = encode(message)
    assert isinstance(again, bytes)
    assert decode(again, direction) == message


def _check_invalid(direction: str, code: str, line: str) -> None:
    rejection = decode(line, direction)
    assert isinstance(rejection, Rejection), rejection
    assert rejection.code == code, rejection
    assert rejection.fatal == (code == "version-mismatch")
    assert rejection.reason


@pytest.mark.parametrize(("direction", "line"), VALID)
def test_project_valid_lines(direction: str, line: str) -> None:
    _check_valid(direction, line)


@pytest.mark.parametrize(("direction", "code", "line"), INVALID)
def test_project_invalid_lines(direction: str, code: str, line: str) -> None:
    _check_invalid(direction, code, line)


@pytest.mark.skipif(
    not REFERENCE.exists(), reason="../shared/reference is not beside this checkout"
)
@pytest.mark.parametrize(("direction", "line"), REF_VALID)
def test_reference_valid_lines(direction: str, line: str) -> None:
    _check_valid(direction, line)


@pytest.mark.skipif(
    not REFERENCE.exists(), reason="../shared/reference is not beside this checkout"
)
@pytest.mark.parametrize(("direction", "code", "line"), REF_INVALID)
def test_reference_invalid_lines(direction: str, code: str, line: str) -> None:
    _check_invalid(direction, code, line)


def test_fixtures_cover_every_message_type() -> None:
    from tether.wire import CONTROL_TYPES, EVENT_TYPES

    seen = {json.loads(line)["type"] for _, line in VALID}
    assert set(EVENT_TYPES) | set(CONTROL_TYPES) <= seen
    codes = {code for _, code, _ in INVALID}
    assert codes == {
        "malformed",
        "invalid",
        "version-mismatch",
        "unknown-type",
        "invalid-payload",
    }


def test_reference_folder_is_complete_when_present() -> None:
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is not beside this checkout")
    assert len(REF_INVALID) == 36
    assert len(REF_VALID) == 31


def test_integral_floats_become_ints() -> None:
    message = decode('{"v":1.0,"seq":3.0,"type":"turn-started","run":"r","turn":2.0}', "event")
    assert not isinstance(message, Rejection)
    assert msgspec.json.encode(message) == (
        b'{"type":"turn-started","v":1,"seq":3,"run":"r","turn":2}'
    )
