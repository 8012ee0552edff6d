"""Tail many inboxes live: one watcher, one worker thread, messages as they land.

Theory of operation: :class:`InboxDrain` keeps a set of (run, inbox path)
pairs and one :class:`~tether.transports.watch.FileWatcher` for all of them.
Its loop waits on the watcher, then drains the inboxes that may have changed
with :func:`~tether.inbox.drain.drain_into` on a single worker thread (SQLite
stays off the event loop), in slices of at most ``max_bytes`` so a backlog
never holds the loop or memory. Newly stored rows go to ``on_message`` and to
every :meth:`InboxDrain.messages` iterator, in file order per run. A drain that
fails (database locked for too long, unreadable file) is retried after the
idle interval; offsets make a retry safe. In polling mode the poll interval is
0.03 s while messages flow and 0.3 s after ten idle rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tether.inbox.drain import CHUNK_BYTES, STATUS_OK, DrainResult, Unfinished, drain_into
from tether.inbox.store import InboxStore, StoredMessage, open_store
from tether.transports.watch import FileWatcher

__all__ = ["InboxDrain", "InboxDrainStatistics"]


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
    unfinished: Unfinished = field(default_factory=Unfinished)


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
        # Held by the drain thread while it drains one inbox (one bounded slice), and by
        # remove(): once remove() returns, no pass stores anything more for that run.
        self._job_lock = threading.Lock()
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
        """Stop tailing ``run_id`` (call :meth:`drain_now` first for a last drain).

        A pass already draining it finishes first (one bounded slice); after that no pass
        or drain stores anything more for ``run_id``.
        """
        with self._job_lock:
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
            with self._job_lock:
                tailed = self._runs.get(run_id)  # removed while queued: leave it
                if tailed is None or tailed.path != path:
                    continue
                result = DrainResult(run_id=run_id, path=os.fspath(path))
                try:
                    drain_into(
                        result,
                        store,
                        collect=collect,
                        max_bytes=self._max_bytes,
                        unfinished=tailed.unfinished,
                    )
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
