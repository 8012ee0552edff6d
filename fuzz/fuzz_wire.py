"""Fuzz the wire decoders: nothing may escape but a message or a Rejection.

The fast first try of ``decode`` and the always-depth-checked path must agree.

Run under atheris when it is installed (``python fuzz/fuzz_wire.py -atheris_runs=100000``),
else a bounded random loop: ``python fuzz/fuzz_wire.py [iterations]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from tether.wire import Receiver, Rejection, codec, decode, normalize
from tether.wire.lines import LineSplitter

TOKENS = [b"{", b"}", b'"', b"\\u", b"1e999", b"\n", b"[", b"null", b"\xff"]
SEEDS = [
    b'{"v":1,"seq":1,"type":"prompt","run":"r","text":"x"}',
    b'{"v":1,"seq":2,"type":"control-ack","run":"r","ref":1,"status":"accepted"}',
    b'{"v":1,"seq":3,"type":"tool-result","run":"r","name":"n","is-error?":false,"result":[1,{"a":2}]}',
    b'{"v":1,"seq":1e400,"type":"cancel","run":"r"}',
    b'{"v":1,"seq":4,"type":"info","run":"r","refs":[1,2]}',
]


def one_input(data: bytes) -> None:
    for direction in ("event", "control"):
        result = decode(data, direction)
        assert result is not None
        # decode's first try (no depth scan for short byte lines) agrees with the path
        # that always scans first
        assert result == codec._decode_checked(data, direction), data
        if not isinstance(result, Rejection):
            assert result.v == 1
    receiver = Receiver("control")
    splitter = LineSplitter(max_line_bytes=64)
    splitter.feed(data)
    while items := splitter.read():
        for item in items:
            if hasattr(item, "data"):
                receiver.receive(item.data)
    try:
        text = data.decode("utf-8", "surrogateescape")
    except UnicodeDecodeError:  # pragma: no cover - surrogateescape always decodes
        return
    normalize({"type": "tool-call", "name": text, "arguments": text})


def random_loop(iterations: int, seed: int = 0) -> int:
    return harness.random_loop(one_input, SEEDS, TOKENS, iterations, seed)


if __name__ == "__main__":
    harness.main(one_input, SEEDS, TOKENS, 200_000)
