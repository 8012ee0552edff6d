"""FileWatcher in both modes: inotify on directories, and stat polling."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.waits import HANG_S, loop_pass, settle

from tether.transports.watch import (
    IN_IGNORED,
    IN_MODIFY,
    IN_Q_OVERFLOW,
    FileWatcher,
    polling_forced,
)

MODES = ["inotify", "polling"]


@pytest.fixture(params=MODES)
def watcher(request: pytest.FixtureRequest) -> Iterator[FileWatcher]:
    polling = request.param == "polling"
    w = FileWatcher(poll_interval=0.02, force_polling=polling)
    if not polling and not w.using_inotify:
        w.close()
        pytest.skip("inotify is not available here")
    assert w.using_inotify is not polling
    yield w
    w.close()


def collect(w: FileWatcher, expected: set[Path]) -> set[Path]:
    """Every path reported until all the expected ones have been (or the hang detector)."""
    seen: set[Path] = set()
    deadline = time.monotonic() + HANG_S
    while not expected <= seen and time.monotonic() < deadline:
        seen |= w.wait_sync(timeout=deadline - time.monotonic())
    return seen


def reported_before(w: FileWatcher, marker: Path) -> set[Path]:
    """What the watcher reports before a change the test makes now to ``marker`` (a
    watched file): events come in order (one inotify queue; one stat pass over every
    polled file), so anything pending shows up no later than the marker's report."""
    append(marker, b"marker\n")
    return collect(w, {marker}) - {marker}


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_file_created_after_watch(watcher: FileWatcher, tmp_path: Path) -> None:
    target, marker = tmp_path / "later.jsonl", tmp_path / "marker"
    marker.write_bytes(b"")
    watcher.watch(target)
    watcher.watch(marker)
    assert reported_before(watcher, marker) == set()  # a missing file is no change
    target.write_bytes(b"x\n")
    assert target in collect(watcher, {target})


def test_appends_are_reported_each_time(watcher: FileWatcher, tmp_path: Path) -> None:
    target = tmp_path / "events.jsonl"
    target.write_bytes(b"")
    watcher.watch(target)
    for i in range(3):
        append(target, b"line %d\n" % i)
        assert collect(watcher, {target}) == {target}


def test_truncation_is_reported(watcher: FileWatcher, tmp_path: Path) -> None:
    target = tmp_path / "inbox.jsonl"
    target.write_bytes(b"0123456789\n")
    watcher.watch(target)
    os.truncate(target, 3)
    assert target in collect(watcher, {target})


def test_replacement_by_rename_is_reported(watcher: FileWatcher, tmp_path: Path) -> None:
    target = tmp_path / "inbox.jsonl"
    target.write_bytes(b"old\n")
    watcher.watch(target)
    other = tmp_path / "new.tmp"
    other.write_bytes(b"new\n")
    os.replace(other, target)
    assert target in collect(watcher, {target})


def test_many_files_in_one_directory(watcher: FileWatcher, tmp_path: Path) -> None:
    files = [tmp_path / f"f{i}.jsonl" for i in range(60)]
    for f in files:
        f.write_bytes(b"")
        watcher.watch(f)
    if watcher.using_inotify:
        assert len(watcher._wds) == 1  # one watch for the whole directory
    reported_before(watcher, files[0])  # creating the files was a change too: taken here
    touched = {files[3], files[17], files[59]}
    for f in touched:
        append(f, b"more\n")
    seen = collect(watcher, touched)
    assert seen == touched


def test_many_directories(watcher: FileWatcher, tmp_path: Path) -> None:
    files = []
    for i in range(25):
        d = tmp_path / f"run{i}"
        d.mkdir()
        files.append(d / "inbox.jsonl")
        watcher.watch(files[-1])
    if watcher.using_inotify:
        assert len(watcher._wds) == 25
    for f in files[::2]:
        f.write_bytes(b"hi\n")
    assert collect(watcher, set(files[::2])) == set(files[::2])


def test_directory_created_after_watch(watcher: FileWatcher, tmp_path: Path) -> None:
    target, marker = tmp_path / "not-yet" / "inbox.jsonl", tmp_path / "marker"
    marker.write_bytes(b"")
    watcher.watch(target)
    watcher.watch(marker)
    assert reported_before(watcher, marker) == set()  # a missing directory is no change
    target.parent.mkdir()
    target.write_bytes(b"x\n")
    assert target in collect(watcher, {target})
    append(target, b"y\n")
    assert target in collect(watcher, {target})


def test_unwatch_stops_reports_and_drops_the_directory_watch(
    watcher: FileWatcher, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for f in (a, b):
        f.write_bytes(b"")
        watcher.watch(f)
    watcher.unwatch(a)
    append(a, b"ignored\n")
    append(b, b"seen\n")
    assert collect(watcher, {b}) == {b}
    assert reported_before(watcher, b) == set()  # a's change was never reported
    watcher.unwatch(b)
    watcher.unwatch(b)  # twice is harmless
    assert watcher.watched() == set()
    assert watcher._wds == {}
    assert watcher._dirs == {}


def test_timeout_returns_an_empty_set(watcher: FileWatcher, tmp_path: Path) -> None:
    quiet = tmp_path / "quiet"
    quiet.write_bytes(b"")
    watcher.watch(quiet)
    assert watcher.wait_sync(timeout=0.1) == set()
    assert watcher.wait_sync(timeout=0) == set()
    assert asyncio.run(watcher.wait(timeout=0.1)) == set()


def test_paths_are_returned_as_given(
    watcher: FileWatcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = Path("rel.jsonl")
    watcher.watch(relative)
    relative.write_bytes(b"x\n")
    assert collect(watcher, {relative}) == {relative}


def test_async_wait_sees_a_write_from_a_task(watcher: FileWatcher, tmp_path: Path) -> None:
    target = tmp_path / "async.jsonl"
    watcher.watch(target)

    async def scenario() -> set[Path]:
        async def writer() -> None:
            await loop_pass()  # the wait below has registered its readers by then
            target.write_bytes(b"hello\n")

        task = asyncio.create_task(writer())
        seen: set[Path] = set()
        while target not in seen:
            seen |= await settle(watcher.wait(), "the write's report")
        await task
        return seen

    assert target in asyncio.run(scenario())


def test_async_wait_can_be_cancelled(watcher: FileWatcher, tmp_path: Path) -> None:
    watcher.watch(tmp_path / "never")

    async def scenario() -> None:
        task = asyncio.create_task(watcher.wait())
        await loop_pass()  # the task is waiting, its readers registered
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the readers were removed: a later wait still works
        assert await watcher.wait(timeout=0.05) == set()

    asyncio.run(scenario())


def test_wake_from_another_thread_ends_a_wait(watcher: FileWatcher, tmp_path: Path) -> None:
    target = tmp_path / "woken"
    watcher.watch(target)
    threading.Timer(0.05, watcher.wake, args=([target],)).start()
    assert watcher.wait_sync(timeout=5) == {target}
    threading.Timer(0.05, watcher.wake).start()
    assert watcher.wait_sync(timeout=5) == set()  # woken early, nothing changed


def test_set_poll_interval_validates(watcher: FileWatcher) -> None:
    watcher.set_poll_interval(0.03)
    assert watcher.poll_interval == 0.03
    with pytest.raises(ValueError, match="positive"):
        watcher.set_poll_interval(0)


def test_closed_watcher_refuses_work(tmp_path: Path) -> None:
    with FileWatcher() as w:
        w.watch(tmp_path / "x")
    w.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        w.wait_sync(timeout=0)


def test_environment_forces_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_FORCE_POLLING", "1")
    assert polling_forced()
    with FileWatcher() as w:
        assert not w.using_inotify
    assert not polling_forced({"TETHER_FORCE_POLLING": "0"})


# -- the inotify record parser, fed crafted bytes -----------------------------


def event(wd: int, mask: int, name: bytes = b"", pad: int = 16) -> bytes:
    raw = name + b"\0" * (pad - len(name)) if name else b""
    return struct.pack("iIII", wd, mask, 0, len(raw)) + raw


@pytest.fixture
def inotify_watcher(tmp_path: Path) -> Iterator[tuple[FileWatcher, Path, Path]]:
    w = FileWatcher()
    if not w.using_inotify:
        w.close()
        pytest.skip("inotify is not available here")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    w.watch(a)
    w.watch(b)
    yield w, a, b
    w.close()


def test_parser_filters_by_name(inotify_watcher: tuple[FileWatcher, Path, Path]) -> None:
    w, a, _ = inotify_watcher
    (wd,) = w._wds
    w._parse_events(event(wd, IN_MODIFY, b"a.jsonl") + event(wd, IN_MODIFY, b"other"))
    assert w._pending == {a}


def test_parser_overflow_reports_everything(
    inotify_watcher: tuple[FileWatcher, Path, Path],
) -> None:
    w, a, b = inotify_watcher
    w._parse_events(event(-1, IN_Q_OVERFLOW))
    assert w.wait_sync(timeout=0) == {a, b}


def test_parser_survives_torn_and_unknown_records(
    inotify_watcher: tuple[FileWatcher, Path, Path],
) -> None:
    w, a, _ = inotify_watcher
    (wd,) = w._wds
    good = event(wd, IN_MODIFY, b"a.jsonl")
    w._parse_events(event(9999, IN_MODIFY, b"a.jsonl") + good + good[:20])
    w._parse_events(struct.pack("iIII", wd, IN_MODIFY, 0, 1 << 30))
    w._parse_events(b"\x01\x02")
    assert w._pending == {a}


def test_lost_directory_is_polled_then_rewatched(
    inotify_watcher: tuple[FileWatcher, Path, Path],
) -> None:
    w, a, b = inotify_watcher
    (wd,) = w._wds
    w._parse_events(event(wd, IN_IGNORED))
    assert w._pending == {a, b}
    assert w._wds == {}
    w.set_poll_interval(0.01)
    w.wait_sync(timeout=0)
    a.write_bytes(b"x\n")  # the next poll re-adds the directory watch
    assert a in collect(w, {a})
    assert len(w._wds) == 1


def test_only_unwatched_directories_are_kept_as_polled(
    inotify_watcher: tuple[FileWatcher, Path, Path], tmp_path: Path
) -> None:
    """A wait looks at the polled directories only (a daemon watches 1,000 run dirs): the
    set follows every watch gained, lost and dropped."""
    w, a, _ = inotify_watcher
    assert w._polled_dirs() == []
    later = tmp_path / "later" / "events.jsonl"
    w.watch(later)  # its directory does not exist yet: polled
    assert [d.path for d in w._polled_dirs()] == [os.fsencode(later.parent)]
    later.parent.mkdir()
    w.set_poll_interval(0.01)
    later.write_bytes(b"x\n")
    assert later in collect(w, {later})  # a poll found it and gave it a watch
    assert w._polled_dirs() == []
    (wd,) = {d.wd for d in w._dirs.values() if d.path == os.fsencode(a.parent)}
    assert wd is not None
    w._parse_events(event(wd, IN_IGNORED))  # the kernel dropped a's directory watch
    assert [d.path for d in w._polled_dirs()] == [os.fsencode(a.parent)]
    w.unwatch(later)
    w.unwatch(a)
    w.unwatch(tmp_path / "b.jsonl")
    assert w._polled_dirs() == []
    assert w._dirs == {}
