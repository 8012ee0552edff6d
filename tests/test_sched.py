"""tether.sched: the daemon's short-slice latency hint (each case in a fresh interpreter, so
the test runner's own scheduling is left alone)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, sys
from tether import sched
niced = os.nice(int(sys.argv[2]))  # relative: the runner may be niced already
before = sched.current_slice_ns()
granted = sched.request_short_slice({sched.SLICE_ENV: sys.argv[1]})
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, json.dumps(sched.current_slice_ns()).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(read, 100))
print(json.dumps({"before": before, "granted": granted, "after": sched.current_slice_ns(),
                  "child": child, "niced": niced, "nice": os.getpriority(os.PRIO_PROCESS, 0)}))
"""


def probe(slice_us: str, nice: int = 0) -> dict[str, int | None]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, slice_us, str(nice)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result: dict[str, int | None] = json.loads(out)
    return result


def custom_slices() -> bool:
    """Linux 6.12+ (EEVDF custom slices)."""
    if platform.system() != "Linux":
        return False
    major, minor = (int(part) for part in platform.release().split(".")[:2])
    return (major, minor) >= (6, 12)


needs_custom_slices = pytest.mark.skipif(
    not custom_slices(), reason="custom scheduler slices need Linux 6.12+"
)


@needs_custom_slices
def test_a_short_slice_is_granted_kept_by_forks_and_leaves_nice_alone() -> None:
    got = probe("250", nice=3)
    assert got["before"] != 250_000
    assert got["granted"] == got["after"] == got["child"] == 250_000
    assert got["nice"] == got["niced"]  # what os.nice(3) made it, from wherever it was


@needs_custom_slices
def test_the_slice_is_clamped_to_the_kernels_range() -> None:
    assert probe("1")["granted"] == 100_000


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_zero_or_junk_asks_for_nothing(value: str) -> None:
    got = probe(value)
    assert got["granted"] is None
    assert got["after"] == got["before"]
