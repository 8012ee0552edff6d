"""Wire codec throughput next to orjson.loads on the same bytes, in the same run.

    python bench/wire_codec.py [--repeat 31]

For each line (a ~200 B text delta written three ways: ASCII, raw UTF-8, and with
``\u00e9`` escapes as ``json.dumps`` writes by default; a ~2 KB and a ~64 KB tool-result)
it prints the median time of `tether.wire.decode` (decode + full validation into a typed
message), of `orjson.loads` (a plain dict, no validation) and of the floor: a bare
msgspec decoder for the line's own Struct class (no union, no depth check, no wrapper).
Ratios are to orjson.loads. Then `tether.wire.encode` (which re-validates what it writes)
and the median cost of rejected lines (a payload error, an envelope error, malformed
JSON). Targets (issue 16): 200 B decode <= 0.8x orjson.loads on all three deltas; a
rejected line <= 5 us. Each round times a batch of each of the three in rotating order;
a ratio is the median of per-round ratios, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import timeit
from collections.abc import Callable

import msgspec
import orjson

from tether.wire import Message, Rejection, decode, encode


def _line(kind: str, **payload: object) -> bytes:
    return msgspec.json.encode({"v": 1, "seq": 9, "type": kind, "run": "subagent-1", **payload})


DELTA_TEXT = {
    "ascii": "Reading the README now; one moment",
    "utf8": "Café déjà vu: naïve résumé, señor",
}


def _delta(text: str, *, ensure_ascii: bool) -> bytes:
    obj = {
        "v": 1,
        "seq": 9,
        "type": "assistant-text-delta",
        "run": "subagent-1",
        "timestamp": "2026-11-30T06:00:01Z",
        "content-index": 2,
        "delta": text,
        "summary": text,
    }
    return json.dumps(obj, ensure_ascii=ensure_ascii, separators=(",", ":")).encode()


def lines() -> dict[str, bytes]:
    deltas = {
        "delta-ascii": _delta(DELTA_TEXT["ascii"], ensure_ascii=True),
        "delta-utf8": _delta(DELTA_TEXT["utf8"], ensure_ascii=False),
        "delta-escaped": _delta(DELTA_TEXT["utf8"], ensure_ascii=True),
    }

    def result(size: int) -> bytes:
        body = ("line of tool output " * (size // 20))[:size]
        return _line(
            "tool-result",
            timestamp="2026-11-30T06:00:02Z",
            name="bash",
            id="call-1",
            **{"tool-call-id": "call-1", "duration-seconds": 0.25, "is-error?": False},
            result={"content": [{"type": "text", "text": body}]},
            summary=body[:80],
        )

    return deltas | {"tool-result-2KB": result(1800), "tool-result-64KB": result(64800)}


def samples_ns(fn: Callable[[], object], number: int, repeat: int) -> list[float]:
    """Nanoseconds per call in each of ``repeat`` batches of ``number`` calls."""
    return [t / number * 1e9 for t in timeit.Timer(fn).repeat(repeat=repeat, number=number)]


def paired(fns: list[Callable[[], object]], repeat: int) -> list[tuple[float, float]]:
    """Per function: median ns per call and the median of per-round ratios to ``fns[1]``.

    Each round times a batch of each function in a rotating order, so load that drifts
    during the run hits all alike; ratios are taken per round before the median.
    """
    number = max(1, timeit.Timer(fns[0]).autorange()[0] // 4)
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(repeat):
        for k in range(len(fns)):
            i = (round_ + k) % len(fns)
            times[i] += samples_ns(fns[i], number, 1)
    base = times[1]
    return [
        (statistics.median(t), statistics.median([x / y for x, y in zip(t, base, strict=True)]))
        for t in times
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; ratios are to orjson.loads")
    print(
        f"{'line':17} {'bytes':>6} {'decode':>9} {'orjson':>9} {'floor':>9} "
        f"{'ratio':>6} {'floor':>6} {'encode':>9}"
    )
    ratios = {}
    for name, data in lines().items():
        message = decode(data, "event")
        assert not isinstance(message, Rejection), message
        assert isinstance(encode(message), bytes)
        floor = msgspec.json.Decoder(type(message)).decode
        assert floor(data) == message
        (ours, ratio), (base, _), (flr, fratio) = paired(
            [
                lambda data=data: decode(data, "event"),
                lambda data=data: orjson.loads(data),
                lambda data=data, floor=floor: floor(data),
            ],
            args.repeat,
        )
        enc = statistics.median(samples_ns(lambda m=message: _encode(m), 2000, args.repeat))
        ratios[name] = ratio
        print(
            f"{name:17} {len(data):6d} {ours:7.0f}ns {base:7.0f}ns {flr:7.0f}ns "
            f"{ratio:5.2f}x {fratio:5.2f}x {enc:7.0f}ns"
        )
    rejected = {
        "payload error": b'{"v":1,"seq":1,"type":"prompt","run":"subagent-1"}',
        "envelope error": b'{"v":1,"seq":0,"type":"cancel","run":"subagent-1"}',
        "malformed": b'{"v":1,"seq":1,',
    }
    worst = 0.0
    for name, data in rejected.items():
        result = decode(data, "control")
        assert isinstance(result, Rejection)
        cost = statistics.median(
            samples_ns(lambda data=data: decode(data, "control"), 20000, args.repeat)
        )
        worst = max(worst, cost)
        print(f"rejected line ({name:14}) {cost / 1000:6.2f} us  [{result.code}]")
    for name in ("delta-ascii", "delta-utf8", "delta-escaped"):
        ratio = ratios[name]
        print(
            f"\ntarget: 200 B decode+validate <= 0.8x orjson.loads ({name}): {ratio:.2f}x "
            f"({'met' if ratio <= 0.8 else 'MISSED'}; median of per-round ratios)",
            end="",
        )
    print()
    print(
        f"target: rejected line <= 5 us: worst {worst / 1000:.2f} us "
        f"({'met' if worst <= 5000 else 'MISSED'}; median over {args.repeat} batches)"
    )


def _encode(message: Message) -> bytes | Rejection:
    return encode(message)


if __name__ == "__main__":
    main()
