"""The depth check under a line built to blow up its memory: many short strings.

Every untrusted decoder (a CLI's stdout line up to 16 MiB, a daemon frame up to 16 MiB)
goes through :func:`tether.jsondepth.check_depth`. Before, its scan split the whole line at
its quotes, one piece per string: a 14 MB ``{"a":`` line peaked at ~430 MB and took
seconds (now ~40 MB, 0.3 s).
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from tests.test_jsondepth import depth_of
from tether import jsondepth
from tether.jsondepth import TooDeep, TooMany, check_depth

LINE_BYTES = 1024 * 1024


@pytest.mark.parametrize(
    "unit",
    [b'{"a":1},', b'{"a":"b\\"c"},', b'["x","y"],'],
    ids=["objects", "escapes", "arrays"],
)
def test_attack_many_short_strings_keep_the_scan_small(unit: bytes) -> None:
    line = b"[" + unit * (LINE_BYTES // len(unit)) + b"1]"
    tracemalloc.start()
    try:
        check_depth(line)  # shallow: every opener is closed at once
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(line), f"peak {peak} for a {len(line)}-byte line"
    with pytest.raises(TooDeep):
        check_depth(b"[" * 200 + line)


SAMPLES: list[Any] = [
    ["[" * 5, {"k]": "{{"}, [[['\\"']]]],
    {"a": [{"b": ['"[', "\\\\"]}], "c": "}" * 7},
    [[[[[[["x", '\\"]]]"']]]]]]],
    ['"' * 9, ["\\" * 5 + '"', [[{}]]]],
]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
@pytest.mark.parametrize("value", SAMPLES)
def test_attack_strings_cut_at_any_slice_boundary_still_count_right(
    value: Any, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsondepth, "SCAN_SLICE", size)
    text = json.dumps(value)
    depth = depth_of(value)
    for data in (text, text.encode()):
        check_depth(data, depth)
        with pytest.raises(TooDeep):
            check_depth(data, depth - 1)


def test_attack_a_cli_line_of_many_containers_is_refused_before_decoding() -> None:
    """A CLI's stdout line of 100,000 small objects: a bad line, and nothing decoded
    (before: msgspec built every dict, a 16 MB line of them peaked at ~435 MB)."""
    from tether.runtime.child.adapters.base import CLI_LINE_CONTAINERS, BadLine, JsonLines

    line = b"[" + b'{"a":1},' * 100_000 + b"1]\n"
    tracemalloc.start()
    try:
        [item] = JsonLines().feed(line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(item, BadLine)
    assert f"more than {CLI_LINE_CONTAINERS} arrays and objects" in item.reason
    assert peak < 4 * len(line), peak
    text = json.dumps({"type": "x", "text": "{[" * 100_000})  # brackets in a string are text
    assert JsonLines().feed(text.encode() + b"\n") == [json.loads(text)]
    with pytest.raises(TooMany):
        check_depth(b"[" + b"{}," * 11 + b"{}]", limit=2, max_containers=10)
    check_depth(b"[" + b"{}," * 8 + b"{}]", limit=2, max_containers=10)  # 10: at the limit
