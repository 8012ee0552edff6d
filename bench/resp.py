"""RESP frame reader throughput: pure Python next to hiredis, in the same run.

    python bench/resp.py [--repeat 7] [--mib 8]

For a 3-field frame (``TEXT``-like, ~40 B), a ~2 KB and a ~64 KB ``TOOL_RESULT`` frame it
feeds a stream of the same frame in 64 KiB chunks (what a pipe read delivers) and prints the
median frames/s of:

- ``PureReader`` (pure Python),
- ``HiredisReader`` (hiredis plus the exact-bytes and limit checks tether adds),
- bare ``hiredis.Reader().gets()`` (reference only: no checks, no limits),

and the ratio hiredis-backed / pure against the target (pure within 6x of hiredis on
3-field frames). Medians over repeats, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tether.framing.resp import NEED_DATA, HiredisReader, PureReader, encode_frame

CHUNK = 64 * 1024
TARGET_RATIO = 6.0


def frames() -> dict[str, bytes]:
    body = b"line of tool output\n" * 3300
    return {
        "3-field": encode_frame([b"TEXT", "Reading the README now; one moment", b""]),
        "2KB": encode_frame([b"TOOL_RESULT", b"toolu_01", b"bash", body[:2048]]),
        "64KB": encode_frame([b"TOOL_RESULT", b"toolu_01", b"bash", body[:65536]]),
    }


def chunks(frame: bytes, total: int) -> tuple[list[bytes], int]:
    count = max(1, total // len(frame))
    stream = frame * count
    return [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)], count


def run_reader(cls: type[PureReader], parts: list[bytes]) -> int:
    reader = cls()
    seen = 0
    for part in parts:
        reader.feed(part)
        while (result := reader.next()) is not NEED_DATA:
            assert type(result) is tuple
            seen += 1
    return seen


def run_bare_hiredis(parts: list[bytes]) -> int:
    import hiredis

    reader = hiredis.Reader()
    seen = 0
    for part in parts:
        reader.feed(part)
        while reader.gets() is not False:
            seen += 1
    return seen


def median_rate(fn: Callable[[], int], expected: int, repeat: int) -> float:
    """Median frames per second over ``repeat`` runs of ``fn``."""
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        seen = fn()
        elapsed = time.perf_counter() - started
        assert seen == expected, (seen, expected)
        rates.append(seen / elapsed)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mib", type=int, default=8, help="stream size per run")
    args = parser.parse_args()
    total = args.mib * 1024 * 1024
    print(f"{'frame':<8} {'pure/s':>11} {'hiredis/s':>11} {'bare/s':>11} {'ratio':>7} {'bare':>6}")
    ratios: dict[str, float] = {}
    for name, frame in frames().items():
        parts, count = chunks(frame, total)
        pure = median_rate(lambda p=parts: run_reader(PureReader, p), count, args.repeat)
        fast = median_rate(lambda p=parts: run_reader(HiredisReader, p), count, args.repeat)
        bare = median_rate(lambda p=parts: run_bare_hiredis(p), count, args.repeat)
        ratios[name] = fast / pure
        print(
            f"{name:<8} {pure:>11,.0f} {fast:>11,.0f} {bare:>11,.0f}"
            f" {fast / pure:>6.2f}x {bare / pure:>5.2f}x"
        )
    verdict = "met" if ratios["3-field"] <= TARGET_RATIO else "MISSED"
    print(
        f"target: pure within {TARGET_RATIO:.0f}x of hiredis on 3-field frames: "
        f"{ratios['3-field']:.2f}x ({verdict})"
    )


if __name__ == "__main__":
    main()
