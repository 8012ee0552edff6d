"""Wire decode beside its floor, a bare msgspec Struct decode of the same bytes, same run.

    python bench/wire_codec.py [--repeat 31] [--instructions]

For each line (a ~200 B text delta written three ways: ASCII, raw UTF-8, and with
``\u00e9`` escapes as ``json.dumps`` writes by default; a ~2 KB and a ~64 KB tool-result)
it prints the median time of `tether.wire.decode` (size and depth bounds, decode and full
validation into the typed message of the direction's union, a rejection for a bad line),
of the **floor**: a bare msgspec Struct with the line's own fields under their kebab names
(``msgspec.defstruct`` from the line's keys: no union, no tag, no constraints, no wrapper),
of the message class's own decoder (``class``: what the union picks, decoded alone) and
of ``orjson.loads`` (a plain dict, no validation). Each round times a batch of each in
rotating order; a ratio is the median of the per-round ratios (the machine is shared).
Then `tether.wire.encode` (which re-validates what it writes) and the cost of rejected
lines (a payload error, an envelope error, malformed JSON).

``--instructions`` also counts the instructions of one decode and of one floor decode
under ``valgrind --tool=callgrind`` (a run of N calls minus a run of none): a measure that
does not move with the machine's load.

Targets (issue 29): 200 B decode+validate <= 1.15x the bare Struct on every form;
a rejected line <= 5 us.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from typing import Any

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


def bare_decoder(data: bytes) -> Callable[[bytes], object]:
    """The floor: a plain Struct with the line's own members under their names on the wire
    (kebab-case, ``?`` and all), decoded by its own msgspec decoder."""
    kinds = {bool: bool, int: int, float: float, str: str}
    fields = []
    rename = {}
    for key, value in orjson.loads(data).items():
        name = "f_" + "".join(c if c.isalnum() else "_" for c in key)
        rename[name] = key
        fields.append((name, kinds.get(type(value), Any)))
    bare = msgspec.defstruct("Bare", fields, rename=rename)
    return msgspec.json.Decoder(bare).decode


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


def callables(data: bytes) -> dict[str, Callable[[], object]]:
    """What is timed for one line: ours, the floor, the class's decoder, orjson."""
    message = decode(data, "event")
    assert not isinstance(message, Rejection), message
    bare = bare_decoder(data)
    cls = msgspec.json.Decoder(type(message)).decode
    assert cls(data) == message
    assert msgspec.structs.asdict(bare(data))  # type: ignore[arg-type]
    return {
        "decode": lambda: decode(data, "event"),
        "floor": lambda: bare(data),
        "class": lambda: cls(data),
        "orjson": lambda: orjson.loads(data),
    }


def instructions(name: str, which: str, calls: int = 20000) -> float:
    """Instructions per call of ``which`` on line ``name`` (callgrind: N calls minus none)."""

    def count(n: int) -> int:
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--count",
            name,
            which,
            str(n),
        ]
        got = subprocess.run(argv, capture_output=True, text=True, check=True).stderr
        match = re.search(r"Collected : (\d+)", got)
        assert match is not None, got[-500:]
        return int(match.group(1))

    return (count(calls) - count(0)) / calls


def run_count(name: str, which: str, n: int) -> None:
    """``--count``: call ``which`` n times (what :func:`instructions` runs under callgrind)."""
    fn = callables(lines()[name])[which]
    for _ in range(n):
        fn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--instructions", action="store_true", help="also count (callgrind)")
    parser.add_argument("--count", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        run_count(args.count[0], args.count[1], int(args.count[2]))
        return
    print(f"load average {os.getloadavg()[0]:.2f}; ratios are medians of per-round ratios")
    print(
        f"{'line':17} {'bytes':>6} {'decode':>8} {'floor':>8} {'class':>8} {'orjson':>8} "
        f"{'/floor':>7} {'class/fl':>8} {'/orjson':>7} {'encode':>8}"
    )
    ratios = {}
    for name, data in lines().items():
        fns = callables(data)
        (ours, ratio), (flr, _), (cls, cratio), (base, bratio) = paired(
            [fns["decode"], fns["floor"], fns["class"], fns["orjson"]], args.repeat
        )
        message = decode(data, "event")
        assert not isinstance(message, Rejection)
        assert isinstance(encode(message), bytes)
        enc = statistics.median(samples_ns(lambda m=message: _encode(m), 2000, args.repeat))
        ratios[name] = ratio
        print(
            f"{name:17} {len(data):6d} {ours:6.0f}ns {flr:6.0f}ns {cls:6.0f}ns {base:6.0f}ns "
            f"{ratio:6.2f}x {cratio:7.2f}x {ratio / bratio:6.2f}x {enc:6.0f}ns"
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
    if args.instructions:
        print("instructions per call (callgrind):")
        for name in lines():
            ours, floor = instructions(name, "decode"), instructions(name, "floor")
            print(f"  {name:17} decode {ours:7.0f}  floor {floor:7.0f}  {ours / floor:.2f}x")
    for name in ("delta-ascii", "delta-utf8", "delta-escaped"):
        ratio = ratios[name]
        print(
            f"target: 200 B decode+validate <= 1.15x the bare Struct ({name}): {ratio:.2f}x "
            f"({'met' if ratio <= 1.15 else 'MISSED'})"
        )
    print(
        f"target: rejected line <= 5 us: worst {worst / 1000:.2f} us "
        f"({'met' if worst <= 5000 else 'MISSED'}; median over {args.repeat} batches)"
    )


def _encode(message: Message) -> bytes | Rejection:
    return encode(message)


if __name__ == "__main__":
    main()
