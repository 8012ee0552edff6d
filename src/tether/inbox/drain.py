"""Drain inbox files into SQLite: once (:func:`drain_file`) or live (:class:`InboxDrain`).

Theory of operation: a run's inbox is append-only. The drain keeps, per run,
the byte offset up to which every line is stored (``inbox_offsets``), reads on
from there in big chunks with ``os.pread``, splits lines with the bounded
:class:`~tether.inbox.reader.LineSplitter`, and stores each chunk's lines and
the new offset in ONE ``BEGIN IMMEDIATE`` transaction. Killed at any instant,
a restart resumes at the committed offset: nothing lost, nothing duplicated
(``INSERT OR IGNORE`` on (run_id, offset) is a second guard).

Inside the transaction the drain first asks which offsets of the chunk are
already stored and parses only the others, so a re-drain of a file whose rows
exist (the offsets forgotten, or a second drainer racing) skips JSON work.
If the stored offset moved under us (another drainer), the chunk is rolled
back and reading restarts from the stored offset.

A file smaller than its offset (truncated) or with another inode/device
(replaced) is recorded once in ``inbox_incidents``, its status turns sticky,
and it is never re-imported from 0.

:class:`InboxDrain` tails many inboxes in an asyncio program with ONE
:class:`~tether.transports.watch.FileWatcher`; the SQLite work runs on one
worker thread, in slices of at most ``max_bytes`` so new messages flow out
live (callback or async iterator) with bounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tether.inbox.messages import MAX_LINE_BYTES, RejectCode, classify, raw_text
from tether.inbox.reader import Line, LineSplitter, Overlong
from tether.inbox.store import (
    AcceptedRow,
    InboxStore,
    OffsetState,
    RejectedRow,
    StoredMessage,
    open_store,
)
from tether.transports.watch import FileWatcher

__all__ = [
    "CHUNK_BYTES",
    "DrainResult",
    "InboxDrain",
    "InboxDrainStatistics",
    "build_rows",
    "drain_file",
    "drain_into",
]

CHUNK_BYTES: Final = 2 * 1024 * 1024
"""Bytes read (and stored in one transaction) at a time."""

STATUS_OK: Final = "ok"
STATUS_MISSING: Final = "missing"
STATUS_TRUNCATED: Final = "truncated"
STATUS_REPLACED: Final = "replaced"


@dataclass
class DrainResult:
    """What one :func:`drain_file` call did."""

    run_id: str
    path: str
    new: int = 0
    duplicates: int = 0
    rejected: int = 0
    bytes_read: int = 0
    offset: int = 0
    status: str = STATUS_OK
    incident: str | None = None
    more: bool = False
    error: str | None = None
    messages: list[StoredMessage] = field(default_factory=list)

    def summary(self) -> str:
        line = (
            f"{self.path} (run {self.run_id}): {self.new} new, {self.duplicates} duplicates"
            f" skipped, {self.rejected} rejected; offset {self.offset}"
        )
        if self.status != STATUS_OK:
            line += f"; {self.status}: {self.incident or 'not re-imported'}"
        return line


def build_rows(
    run_id: str, items: Iterable[Line | Overlong], now: float, max_line: int = MAX_LINE_BYTES
) -> tuple[list[AcceptedRow], list[RejectedRow]]:
    """Rows for the lines: accepted objects keep their body, the others a reason."""
    accepted: list[AcceptedRow] = []
    rejected: list[RejectedRow] = []
    accept, check = accepted.append, classify
    for item in items:
        offset, data = item
        if type(item) is Overlong:
            reason = f"{RejectCode.TOO_LONG}: line over {max_line} bytes, skipped to its newline"
            rejected.append((run_id, offset, raw_text(data), reason, now))
            continue
        body, kind, code, why = check(data)
        if body is not None:
            accept((run_id, offset, kind, body, now))
        else:
            rejected.append((run_id, offset, raw_text(data), f"{code}: {why}", now))
    return accepted, rejected


class _FileDrain:
    """One drain_file call: the open file, its splitter and the running result."""

    def __init__(self, store: InboxStore, fd: int, st: os.stat_result, result: DrainResult):
        self.store, self.fd, self.st, self.result = store, fd, st, result
        self.splitter = LineSplitter()
        self.committed = 0

    def start(self, state: OffsetState | None) -> bool:
        """Check the stored state against the file; False when there is nothing to do."""
        if state is None:
            self._restart(0, skipping=False)
            return True
        self._restart(state.offset, skipping=state.skipping)
        if state.status != STATUS_OK:
            self.result.status = state.status
            return False
        problem = self._problem(state)
        if problem is not None:
            self._report(state, *problem)
            return False
        return self.st.st_size > state.offset

    def _restart(self, offset: int, *, skipping: bool) -> None:
        self.splitter = LineSplitter(offset=offset, skipping=skipping)
        self.committed = self.result.offset = offset

    def _problem(self, state: OffsetState) -> tuple[str, str] | None:
        st = self.st
        if (state.inode, state.dev) != (st.st_ino, st.st_dev):
            detail = (
                f"inbox file replaced: inode {state.inode} on device {state.dev} became"
                f" {st.st_ino} on {st.st_dev}; {state.offset} bytes were already stored"
            )
            return STATUS_REPLACED, detail
        if st.st_size < state.offset:
            detail = (
                f"inbox file truncated to {st.st_size} bytes,"
                f" below the stored offset {state.offset}"
            )
            return STATUS_TRUNCATED, detail
        return None

    def _report(self, state: OffsetState, status: str, detail: str) -> None:
        now = time.time()
        with self.store.transaction():
            current = self.store.offset_state(state.run_id)
            if current is not None and current.status != STATUS_OK:
                self.result.status = current.status
                return
            base = current or state
            self.store.record_incident(
                run_id=base.run_id, path=self.result.path, kind=status, detail=detail, now=now
            )
            self.store.save_offset(
                run_id=base.run_id,
                path=base.path,
                inode=base.inode,
                dev=base.dev,
                offset=base.offset,
                skipping=base.skipping,
                status=status,
                now=now,
            )
        self.result.status, self.result.incident = status, detail

    def record_file(self, collect: bool) -> None:
        """Store the file's inode and device before any line (even if it is empty)."""
        try:
            self._commit([], self.committed, self.splitter.skipping, collect)
        except _Moved as moved:
            self.start(moved.state)

    def step(self, chunk: int, collect: bool) -> bool:
        """Read and store one chunk; False at the end of the file (or on a problem)."""
        data = os.pread(self.fd, chunk, self.splitter.position)
        if not data:
            return False
        self.result.bytes_read += len(data)
        items = self.splitter.feed(data)
        resume, skipping = self.splitter.resume_offset, self.splitter.skipping
        if items or resume != self.committed:
            return self._commit(items, resume, skipping, collect)
        return True

    def _commit(
        self, items: list[Line | Overlong], resume: int, skipping: bool, collect: bool
    ) -> bool:
        store, result = self.store, self.result
        now = time.time()
        with store.transaction():
            state = store.offset_state(result.run_id)
            if state is not None and (state.offset != self.committed or state.status != STATUS_OK):
                raise _Moved(state)
            fresh = items
            if items:
                seen = store.existing_offsets(result.run_id, items[0][0], items[-1][0] + 1)
                if seen:
                    fresh = [item for item in items if item[0] not in seen]
            accepted, rejected = build_rows(result.run_id, fresh, now)
            store.insert_rows(accepted, rejected)
            store.save_offset(
                run_id=result.run_id,
                path=result.path,
                inode=self.st.st_ino,
                dev=self.st.st_dev,
                offset=resume,
                skipping=skipping,
                status=STATUS_OK,
                now=now,
            )
        self.committed = result.offset = resume
        new = len(accepted) + len(rejected)
        result.new += new
        result.duplicates += len(items) - new
        result.rejected += len(rejected)
        if collect:
            stored = [StoredMessage.accepted(row) for row in accepted]
            if rejected:
                stored += [StoredMessage.rejected_row(row) for row in rejected]
                stored.sort(key=_by_offset)
            result.messages.extend(stored)
        return True


def _by_offset(message: StoredMessage) -> int:
    return message.offset


class _Moved(Exception):
    """Internal: the stored offset moved under this drain (another drainer)."""

    def __init__(self, state: OffsetState) -> None:
        self.state = state


def drain_file(
    store: InboxStore,
    path: str | os.PathLike[str],
    run_id: str,
    *,
    collect: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    max_bytes: int | None = None,
) -> DrainResult:
    """Store every new complete line of ``path`` for ``run_id``; return what happened.

    ``collect`` keeps the newly stored rows in ``result.messages``; ``max_bytes``
    bounds the bytes read in this call (``result.more`` says whether more is
    waiting). A missing file gives status ``missing`` and changes nothing.
    Database and read errors (``sqlite3.Error``, ``OSError``) propagate; what
    was committed before them stays committed.
    """
    result = DrainResult(run_id=run_id, path=os.fspath(path))
    drain_into(result, store, collect=collect, chunk_bytes=chunk_bytes, max_bytes=max_bytes)
    return result


def drain_into(
    result: DrainResult,
    store: InboxStore,
    *,
    collect: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    max_bytes: int | None = None,
) -> None:
    """:func:`drain_file` filling ``result`` as it goes (kept even if this raises)."""
    try:
        fd = os.open(result.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        result.status = STATUS_MISSING
        state = store.offset_state(result.run_id)
        result.offset = state.offset if state is not None else 0
        return
    try:
        job = _FileDrain(store, fd, os.fstat(fd), result)
        state = store.offset_state(result.run_id)
        if not job.start(state):
            return
        if state is None:
            job.record_file(collect)
        _run(job, chunk_bytes, max_bytes, collect)
    finally:
        os.close(fd)


def _run(job: _FileDrain, chunk_bytes: int, max_bytes: int | None, collect: bool) -> None:
    budget = max_bytes
    while True:
        if budget is not None and budget <= 0:
            job.result.more = True
            return
        size = chunk_bytes if budget is None else min(chunk_bytes, budget)
        before = job.result.bytes_read
        try:
            if not job.step(size, collect):
                return
        except _Moved as moved:
            if not job.start(moved.state):
                return
        if budget is not None:
            budget -= job.result.bytes_read - before


# -- live: many inboxes, one watcher ------------------------------------------


@dataclass(frozen=True)
class InboxDrainStatistics:
    """Counters since an :class:`InboxDrain` started."""

    runs: int
    passes: int
    new: int
    duplicates: int
    rejected: int
    bytes_read: int
    incidents: tuple[str, ...]
    errors: int
    last_error: str | None
    using_inotify: bool
    offsets: dict[str, int]
    statuses: dict[str, str]


@dataclass
class _Tailed:
    run_id: str
    path: Path
    offset: int = 0
    status: str = STATUS_OK


class InboxDrain:
    """Tail many inboxes into the database, live, with one watcher and one worker thread.

    Use ``async with InboxDrain(db) as drain:`` (or :meth:`start` / :meth:`aclose`).
    ``add(path, run_id)`` starts tailing (existing content is stored too);
    ``remove(run_id)`` stops. New rows reach ``on_message`` and every
    :meth:`messages` iterator, in file order per run. Closing drains one last time.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        watcher: FileWatcher | None = None,
        on_message: Callable[[StoredMessage], object] | None = None,
        max_bytes: int = 8 * CHUNK_BYTES,
        busy_interval: float = 0.03,
        idle_interval: float = 0.3,
    ) -> None:
        self._db = db
        self._store: InboxStore | None = None
        self._own_watcher = watcher is None
        self._watcher = watcher if watcher is not None else FileWatcher(poll_interval=idle_interval)
        self._on_message = on_message
        self._max_bytes = max_bytes
        self._busy, self._idle = busy_interval, idle_interval
        self._runs: dict[str, _Tailed] = {}
        self._by_path: dict[Path, str] = {}
        self._dirty: set[str] = set()
        self._queues: list[asyncio.Queue[StoredMessage | None]] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-inbox")
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._passes = self._new = self._duplicates = self._rejected = self._bytes = 0
        self._incidents: list[str] = []
        self._errors = 0
        self._last_error: str | None = None

    # -- registration ----------------------------------------------------------

    def add(self, path: str | os.PathLike[str], run_id: str) -> None:
        """Tail ``path`` as the inbox of ``run_id`` (it may not exist yet)."""
        tailed = _Tailed(run_id, Path(os.path.abspath(path)))
        old = self._runs.get(run_id)
        if old is not None:
            self.remove(run_id)
        self._runs[run_id] = tailed
        self._by_path[tailed.path] = run_id
        self._watcher.watch(tailed.path)
        self._dirty.add(run_id)
        self._watcher.wake()

    def remove(self, run_id: str) -> None:
        """Stop tailing ``run_id`` (call :meth:`drain_now` first for a last drain)."""
        tailed = self._runs.pop(run_id, None)
        if tailed is None:
            return
        self._by_path.pop(tailed.path, None)
        self._dirty.discard(run_id)
        self._watcher.unwatch(tailed.path)

    # -- life cycle --------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._store = await loop.run_in_executor(self._executor, open_store, self._db)
            self._task = asyncio.create_task(self._run(), name="tether-inbox-drain")

    async def __aenter__(self) -> InboxDrain:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop tailing after one final drain of every inbox; end the iterators."""
        if self._closing:
            return
        self._closing = True
        self._watcher.wake()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            with contextlib.suppress(Exception):
                await self.drain_now()
        for queue in self._queues:
            await queue.put(None)
        if self._store is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._store.close)
        self._executor.shutdown(wait=False)
        if self._own_watcher:
            self._watcher.close()

    # -- output ------------------------------------------------------------------

    def messages(self, maxsize: int = 10_000) -> AsyncIterator[StoredMessage]:
        """Newly stored messages from now on, until the drain closes."""
        queue: asyncio.Queue[StoredMessage | None] = asyncio.Queue(maxsize)
        self._queues.append(queue)

        async def iterate() -> AsyncIterator[StoredMessage]:
            try:
                while (item := await queue.get()) is not None:
                    yield item
            finally:
                with contextlib.suppress(ValueError):
                    self._queues.remove(queue)

        return iterate()

    def statistics(self) -> InboxDrainStatistics:
        return InboxDrainStatistics(
            runs=len(self._runs),
            passes=self._passes,
            new=self._new,
            duplicates=self._duplicates,
            rejected=self._rejected,
            bytes_read=self._bytes,
            incidents=tuple(self._incidents),
            errors=self._errors,
            last_error=self._last_error,
            using_inotify=self._watcher.using_inotify,
            offsets={run: t.offset for run, t in self._runs.items()},
            statuses={run: t.status for run, t in self._runs.items()},
        )

    # -- draining ----------------------------------------------------------------

    async def drain_now(self, run_id: str | None = None) -> list[DrainResult]:
        """Drain ``run_id`` (or every inbox) to its end right now."""
        targets = [run_id] if run_id is not None else list(self._runs)
        results: list[DrainResult] = []
        for target in targets:
            while True:
                batch = await self._drain([target])
                results.extend(batch)
                if not any(r.more for r in batch):
                    break
        return results

    async def drain_changed(self, paths: Iterable[Path]) -> list[DrainResult]:
        """Drain the inboxes among ``paths`` (for a caller that runs its own watcher)."""
        runs = {self._by_path[p] for p in map(_absolute, paths) if p in self._by_path}
        return await self._drain(sorted(runs))

    async def _run(self) -> None:
        idle_rounds = 0
        while not self._closing:
            dirty, self._dirty = self._dirty, set()
            results = await self._drain(sorted(dirty)) if dirty else []
            self._dirty.update(r.run_id for r in results if r.more)
            failed = {r.run_id for r in results if r.error is not None}
            if failed:  # back off, then try again: offsets make a retry safe
                self._note_changes(await self._watcher.wait(timeout=self._idle))
                self._dirty |= failed
                continue
            if any(r.new for r in results):
                idle_rounds = 0
                self._watcher.set_poll_interval(self._busy)
            elif (idle_rounds := idle_rounds + 1) == 10:
                self._watcher.set_poll_interval(self._idle)
            if self._dirty or self._closing:
                continue
            self._note_changes(await self._watcher.wait())

    def _note_changes(self, changed: set[Path]) -> None:
        by_path = self._by_path
        self._dirty.update(by_path[p] for p in map(_absolute, changed) if p in by_path)

    async def _drain(self, run_ids: list[str]) -> list[DrainResult]:
        jobs = [(r, self._runs[r].path) for r in run_ids if r in self._runs]
        if not jobs or self._store is None:
            return []
        collect = bool(self._queues) or self._on_message is not None
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._executor, self._drain_sync, jobs, collect)
        for result in results:
            await self._account(result)
        return results

    def _drain_sync(self, jobs: list[tuple[str, Path]], collect: bool) -> list[DrainResult]:
        store = self._store
        assert store is not None
        results = []
        for run_id, path in jobs:
            tailed = self._runs.get(run_id)  # removed while queued: leave it
            if tailed is None or tailed.path != path:
                continue
            result = DrainResult(run_id=run_id, path=os.fspath(path))
            try:
                drain_into(result, store, collect=collect, max_bytes=self._max_bytes)
            except (sqlite3.Error, OSError) as exc:  # retried; what was stored is kept
                result.error = f"{type(exc).__name__}: {exc}"
            results.append(result)
        return results

    async def _account(self, result: DrainResult) -> None:
        self._passes += 1
        self._new += result.new
        self._duplicates += result.duplicates
        self._rejected += result.rejected
        self._bytes += result.bytes_read
        if result.incident is not None:
            self._incidents.append(f"{result.run_id}: {result.incident}")
        if result.error is not None:
            self._errors += 1
            self._last_error = f"{result.run_id}: {result.error}"
        tailed = self._runs.get(result.run_id)
        if tailed is not None:
            tailed.offset, tailed.status = result.offset, result.status
        for message in result.messages:
            if self._on_message is not None:
                self._on_message(message)
            for queue in list(self._queues):
                await queue.put(message)


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))
