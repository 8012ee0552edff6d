"""A full disk: a clear one-line error and an honest exit code, never a hang (item 14).

As root the disk is a real 1 MiB tmpfs (mounted and unmounted by the test); otherwise the
same runs get ``RLIMIT_FSIZE`` (writes past the limit fail with ``EFBIG``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
LIMIT = 1 << 20


@dataclass
class SmallDisk:
    root: Path
    preexec: Callable[[], None] | None  # for RLIMIT_FSIZE; None on a real tmpfs

    def fill(self) -> None:
        if self.preexec is not None:
            return  # the limit applies to every file written: nothing to fill
        with (self.root / "filler").open("wb") as handle, _suppress_enospc():
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()


class _suppress_enospc:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


def _fsize_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.fixture
def small_disk() -> Iterator[SmallDisk]:
    root = Path(tempfile.mkdtemp(prefix="td-disk-", dir="/tmp"))
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={LIMIT},mode=0700", "tmpfs", str(root)],
            capture_output=True,
        )
        mounted = done.returncode == 0
    try:
        yield SmallDisk(root, None if mounted else _fsize_limit)
    finally:
        if mounted:
            subprocess.run(["umount", str(root)], check=True)
        shutil.rmtree(root, ignore_errors=True)


def _run(disk: SmallDisk, env: dict[str, str], replies: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tether", "run", "--provider", "scripted"]
    return subprocess.run(
        [*argv, "--script", str(replies), "--no-stdin", "the task"],
        capture_output=True,
        text=True,
        env={**env, "TETHER_HOME": str(disk.root / "home")},
        timeout=90,
        preexec_fn=disk.preexec,
        stdin=subprocess.DEVNULL,
    )


def _replies(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps([{"text": text}]))
    return path


def test_tether_run_on_a_full_disk_says_so_in_one_line(
    small_disk: SmallDisk, tmp_path: Path, tether_env: dict[str, str]
) -> None:
    if small_disk.preexec is not None:
        pytest.skip("a disk full before the run starts needs a real tmpfs (root)")
    small_disk.fill()
    done = _run(small_disk, tether_env, _replies(tmp_path, "ok"))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done  # nothing could start
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert "No space left on device" in errors[0]


def test_a_disk_that_fills_mid_run_fails_it_promptly_and_tears_no_line(
    small_disk: SmallDisk, tmp_path: Path, tether_env: dict[str, str]
) -> None:
    ballast = small_disk.root / "ballast"
    if small_disk.preexec is None:
        ballast.write_bytes(b"\0" * (LIMIT // 4))  # freed afterwards: the disk recovers
    done = _run(small_disk, tether_env, _replies(tmp_path, "y" * 3_000_000))
    ballast.unlink(missing_ok=True)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 4, done
    assert "failed" in done.stderr
    (events,) = (small_disk.root / "home" / "runs").glob("*/events.jsonl")
    data = events.read_bytes()
    assert data.endswith(b"\n")  # the last line is whole: no torn line for a later reader
    for line in data.splitlines():
        json.loads(line)
    runs = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "--json"],
        capture_output=True,
        text=True,
        env={**tether_env, "TETHER_HOME": str(small_disk.root / "home")},
        timeout=30,
    )
    assert '"failed"' in runs.stdout, runs  # the row says how the run ended
    assert '"running"' not in runs.stdout, runs.stdout


@pytest.mark.parametrize("free_kib", [16, 96])
def test_a_disk_that_fills_as_the_run_starts_still_gets_its_row(
    small_disk: SmallDisk, tmp_path: Path, tether_env: dict[str, str], free_kib: int
) -> None:
    """Room for the run directory but not for the index row: the run (done with 16 KiB
    left, failed with 96 KiB: then the child cannot write its events) once had no row at
    all. Once there is room, `tether runs` lists it, recovered from its directory, with
    the status its exit code said."""
    if small_disk.preexec is not None:
        pytest.skip("a disk that fills as the run starts needs a real tmpfs (root)")
    filler = small_disk.root / "filler"
    free = os.statvfs(small_disk.root).f_bavail * os.statvfs(small_disk.root).f_frsize
    filler.write_bytes(b"\0" * (free - free_kib * 1024))
    done = _run(small_disk, tether_env, _replies(tmp_path, "ok"))
    filler.unlink()  # room again
    assert done.returncode in (0, 4), done
    (run_dir,) = (small_disk.root / "home" / "runs").iterdir()
    home = {**tether_env, "TETHER_HOME": str(small_disk.root / "home")}
    runs = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "--json"],
        capture_output=True,
        text=True,
        env=home,
        timeout=30,
    )
    (row,) = [json.loads(line) for line in runs.stdout.splitlines()]
    assert (row["id"], row["task"]) == (run_dir.name, "the task")
    assert row["status"] == {0: "done", 4: "failed"}[done.returncode], row
    assert not (run_dir / ".row-pending").exists()


def test_the_event_log_cuts_back_a_partial_line_and_says_so(tmp_path: Path) -> None:
    """Under RLIMIT_FSIZE a line crossing the limit is written in part, then EFBIG."""
    script = f"""
import resource, signal, sys
sys.path[:0] = {sys.path!r}
from tether.runtime.child.files import EventLog
from tether.wire import messages as m
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
log = EventLog({str(tmp_path / "events.jsonl")!r}, "r1")
errors = []
log.on_error = errors.append
for _ in range(100):
    log.emit(m.Info, summary="x" * 150)
log.emit(m.Info, summary="after")
print(len(errors), type(errors[0]).__name__, log.closed)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["1", "OSError", "True"]
    data = (tmp_path / "events.jsonl").read_bytes()
    assert data.endswith(b"\n")
    assert 0 < len(data) <= 4096
    assert all(json.loads(line)["summary"] == "x" * 150 for line in data.splitlines())
