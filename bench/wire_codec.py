"""Wire codec throughput next to orjson.loads on the same bytes, in the same run.

    python bench/wire_codec.py [--repeat 31]

For each line (a ~200 B text delta, a ~2 KB and a ~64 KB tool-result) it prints the
median time of `tether.wire.decode` (decode + full validation into a typed message),
of `orjson.loads` (a plain dict, no validation), their ratio, and `tether.wire.encode`
(which re-validates what it writes). Then the median cost of rejected lines (a payload
error, an envelope error, malformed JSON). Targets: 200 B decode <= 1.0x orjson.loads;
a rejected line <= 5 us. Rounds time ours and the baseline back to back; the ratio is
the median of per-round ratios, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

import msgspec
import orjson

from tether.wire import Rejection, decode, encode


def _line(kind: str, **payload: object) -> bytes:
    return msgspec.json.encode({"v": 1, "seq": 9, "type": kind, "run": "subagent-1", **payload})


def lines() -> dict[str, bytes]:
    delta = _line(
        "assistant-text-delta",
        timestamp="2026-11-30T06:00:01Z",
        **{"content-index": 2},
        delta="Reading the README now; one moment",
        summary="Reading the README now; one moment",
    )

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

    return {"delta-200B": delta, "tool-result-2KB": result(1800), "tool-result-64KB": result(64800)}


def samples_ns(fn: Callable[[], object], number: int, repeat: int) -> list[float]:
    """Nanoseconds per call in each of ``repeat`` batches of ``number`` calls."""
    return [t / number * 1e9 for t in timeit.Timer(fn).repeat(repeat=repeat, number=number)]


def paired(
    ours: Callable[[], object], base: Callable[[], object], repeat: int
) -> tuple[float, float, float]:
    """Median ns of ``ours`` and ``base`` and the median of per-round ratios.

    Each round times a batch of each, back to back, so load that drifts during the run
    hits both alike; the ratio is taken per round before the median.
    """
    number = max(1, timeit.Timer(ours).autorange()[0] // 4)
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        a += samples_ns(ours, number, 1)
        b += samples_ns(base, number, 1)
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return statistics.median(a), statistics.median(b), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    print(f"{'line':18} {'bytes':>6} {'decode':>10} {'orjson':>10} {'ratio':>6} {'encode':>10}")
    ratios = {}
    for name, data in lines().items():
        message = decode(data, "event")
        assert not isinstance(message, Rejection), message
        assert isinstance(encode(message), bytes)
        ours, base, ratio = paired(
            lambda data=data: decode(data, "event"),
            lambda data=data: orjson.loads(data),
            args.repeat,
        )
        enc = statistics.median(samples_ns(lambda m=message: encode(m), 2000, args.repeat))
        ratios[name] = ratio
        print(f"{name:18} {len(data):6d} {ours:8.0f}ns {base:8.0f}ns {ratio:5.2f}x {enc:8.0f}ns")
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
    delta = ratios["delta-200B"]
    print(
        f"\ntarget: 200 B decode+validate <= 1.0x orjson.loads: {delta:.2f}x "
        f"({'met' if delta <= 1.0 else 'MISSED'}; median of per-round ratios)"
    )
    print(
        f"target: rejected line <= 5 us: worst {worst / 1000:.2f} us "
        f"({'met' if worst <= 5000 else 'MISSED'}; median over {args.repeat} batches)"
    )


if __name__ == "__main__":
    main()
