"""Fuzz every JSON decoder of untrusted input through the one depth check.

Run under atheris when it is installed (``python fuzz/fuzz_json_depth.py -atheris_runs=100000``),
else a bounded random loop: ``python fuzz/fuzz_json_depth.py [iterations]``.

Invariants: :func:`tether.jsondepth.check_depth` raises nothing but ``TooDeep``; when the
input is valid JSON it raises exactly when the value is deeper than the limit; and the
inbox, daemon and wire decoders answer any bytes, nested to any depth, with a value or a
rejection (no ``RecursionError``, nothing else escapes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from tether import jsondepth
from tether.daemon.rpc.protocol import ProtocolError, Request, Response, decode_message, recover_id
from tether.inbox.messages import InboxRejection, parse_line
from tether.wire import Rejection, decode

LIMIT = 6
TOKENS = [b"[", b"]", b"{", b"}", b'"', b"\\", b"[" * 200, b"{" * 200, b'{"a":', b",", b"\xff"]
SEEDS = [
    b'{"type":"progress","text":"[{"}',
    b'{"id":1,"method":"agent.spawn","params":{"argv":["a"],"env":{"K":"[]"}}}',
    b'{"id":2,"result":[[[[1]]]]}',
    b'{"v":1,"seq":1,"type":"prompt","run":"r","text":"x"}',
    b'[[["\\"]"]],{}]',
]


def depth_of(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, list | dict):
            deepest = max(deepest, level + 1)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def one_input(data: bytes) -> None:
    try:
        jsondepth.check_depth(data, LIMIT)
        refused = False
    except jsondepth.TooDeep:
        refused = True
    if len(data) < 2000:  # the stdlib parser recurses; keep its inputs shallow enough
        try:
            value = json.loads(data) if data.count(b"[") + data.count(b"{") < 400 else None
        except (ValueError, RecursionError):
            value = None
        if value is not None:
            assert refused == (depth_of(value) > LIMIT), data
    parse_line(data)  # never raises
    assert isinstance(decode_message(data), Request | Response | ProtocolError)
    assert isinstance(recover_id(data), int)
    for direction in ("event", "control"):
        result = decode(data, direction)
        assert isinstance(result, Rejection) or result.v == 1
    deep = b"[" * 5000 + data
    assert isinstance(parse_line(deep), InboxRejection)
    assert isinstance(decode_message(deep), ProtocolError)


def random_loop(iterations: int, seed: int = 0) -> int:
    return harness.random_loop(one_input, SEEDS, TOKENS, iterations, seed)


if __name__ == "__main__":
    harness.main(one_input, SEEDS, TOKENS, 100_000)
