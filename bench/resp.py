"""RESP frame reader throughput: pure Python next to hiredis, in the same run.

    python bench/resp.py [--repeat 9] [--mib 8]

For a 3-field frame (``TEXT``-like, ~40 B), a ~2 KB and a ~64 KB ``TOOL_RESULT`` frame it
feeds a stream of the same frame in 64 KiB chunks (what a pipe read delivers) and prints the
median frames/s of:

- ``PureReader`` (pure Python),
- ``HiredisReader`` (hiredis plus the exact-bytes and limit checks tether adds),
- bare ``hiredis.Reader().gets()`` (reference only: no checks, no limits),

and the ratios to pure (medians of per-repeat ratios; the readers run in rotating order
so load drifting during the run hits all alike) against the target (pure within 6x of hiredis on
3-field frames). Medians over repeats, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tether.framing.resp import PureReader, encode_frame
from tether.framing.resp_hiredis import HiredisReader
from tether.wire.needdata import NEED_DATA

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


def rates(
    runners: dict[str, Callable[[], int]], expected: int, repeat: int
) -> dict[str, list[float]]:
    """Frames per second of each runner, ``repeat`` times, in rotating order."""
    out: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for i in range(repeat):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            seen = runners[name]()
            elapsed = time.perf_counter() - started
            assert seen == expected, (name, seen, expected)
            out[name].append(seen / elapsed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--mib", type=int, default=8, help="stream size per run")
    args = parser.parse_args()
    total = args.mib * 1024 * 1024
    print(f"{'frame':<8} {'pure/s':>11} {'hiredis/s':>11} {'bare/s':>11} {'ratio':>7} {'bare':>7}")
    ratios: dict[str, tuple[float, float]] = {}
    for name, frame in frames().items():
        parts, count = chunks(frame, total)
        runners: dict[str, Callable[[], int]] = {
            "pure": lambda p=parts: run_reader(PureReader, p),
            "hiredis": lambda p=parts: run_reader(HiredisReader, p),
            "bare": lambda p=parts: run_bare_hiredis(p),
        }
        got = rates(runners, count, args.repeat)
        pure, fast, bare = (statistics.median(got[k]) for k in ("pure", "hiredis", "bare"))
        fast_ratio = statistics.median(
            f / p for f, p in zip(got["hiredis"], got["pure"], strict=True)
        )
        bare_ratio = statistics.median(b / p for b, p in zip(got["bare"], got["pure"], strict=True))
        ratios[name] = (fast_ratio, bare_ratio)
        print(
            f"{name:<8} {pure:>11,.0f} {fast:>11,.0f} {bare:>11,.0f}"
            f" {fast_ratio:>6.2f}x {bare_ratio:>6.2f}x"
        )
    print(
        "ratio = HiredisReader / PureReader, bare = bare hiredis (no checks) / PureReader: "
        "medians of per-repeat ratios"
    )
    fast_ratio, bare_ratio = ratios["3-field"]
    for label, ratio in (("tether's HiredisReader", fast_ratio), ("bare hiredis", bare_ratio)):
        verdict = "met" if ratio <= TARGET_RATIO else "missed"
        print(
            f"target: pure within {TARGET_RATIO:.0f}x of hiredis on 3-field frames: "
            f"{ratio:.2f}x of {label} ({verdict})"
        )


if __name__ == "__main__":
    main()
