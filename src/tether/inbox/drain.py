"""Drain inbox files into SQLite: once (:func:`drain_file`) or live (:class:`InboxDrain`).

Theory of operation: a run's inbox is append-only. The drain keeps, per run,
the byte offset up to which every line is stored (``inbox_offsets``), reads on
from there in big chunks with ``os.pread``, splits lines with the bounded
:class:`~tether.wire.lines.LineSplitter` (the wire's, with the inbox's 16 MiB limit),
and stores each chunk's lines and the new offset in ONE ``BEGIN IMMEDIATE``
transaction. Killed at any instant, a restart resumes at the committed offset: nothing
lost, nothing duplicated (``INSERT OR IGNORE`` on (run_id, offset) is a second guard).

Inside the transaction the drain first counts the chunk's stored rows (one index
range count; a row exists only at a line's offset) and, when some but not all are
there, asks which; it parses only the others, so a re-drain of a file whose rows
exist (the offsets forgotten, or a second drainer racing) skips JSON work.
If the stored offset moved under us (another drainer), the chunk is rolled
back and reading restarts from the stored offset.

Every call makes progress: a budget (``max_bytes``) stops a call only once the stored
offset has moved, so a line longer than the budget is read on to its newline (at most
the line limit; past it, it is skipped). A live tail that passes an :class:`Unfinished`
is spared reading an unfinished last line again on every wake-up: the next call only
looks for a newline in the bytes appended since, and reads the line once it is whole.

A file smaller than its offset (truncated) or with another inode/device
(replaced) is recorded once in ``inbox_incidents``, its status turns sticky,
and it is never re-imported from 0.

:class:`~tether.inbox.live.InboxDrain` tails many
inboxes in an asyncio program with ONE file watcher.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from tether import fsafe
from tether.inbox.messages import MAX_MESSAGE_BYTES, RejectCode, classify, raw_text
from tether.inbox.store import (
    AcceptedRow,
    InboxStore,
    OffsetState,
    RejectedRow,
    StoredMessage,
)
from tether.wire.lines import LineSplitter, PairItem, TooLarge

__all__ = [
    "CHUNK_BYTES",
    "DrainResult",
    "Unfinished",
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


@dataclass
class Unfinished:
    """A live tail's memory of its inbox's unfinished last line: from ``offset`` (the
    stored offset then) up to ``scanned`` the file has no newline. Kept between calls by
    the caller; two integers, never the bytes."""

    offset: int = -1
    scanned: int = 0


def build_rows(
    items: Iterable[PairItem], max_line: int = MAX_MESSAGE_BYTES
) -> tuple[list[AcceptedRow], list[RejectedRow]]:
    """Rows for the lines: accepted objects keep their body, the others a reason."""
    accepted: list[AcceptedRow] = []
    rejected: list[RejectedRow] = []
    accept, check = accepted.append, classify
    for item in items:
        offset, data = item
        if type(item) is TooLarge:
            reason = f"{RejectCode.TOO_LONG}: line over {max_line} bytes, skipped to its newline"
            rejected.append((offset, raw_text(data), reason))
            continue
        body, kind, code, why = check(data)
        if body is not None:
            accept((offset, kind, body))
        else:
            rejected.append((offset, raw_text(data), f"{code}: {why}"))
    return accepted, rejected


def _splitter(offset: int, *, skipping: bool) -> LineSplitter:
    # a message of exactly MAX_MESSAGE_BYTES is allowed; one byte more is too large
    return LineSplitter(offset=offset, max_line_bytes=MAX_MESSAGE_BYTES + 1, skipping=skipping)


class _FileDrain:
    """One drain_file call: the open file, its splitter and the running result."""

    def __init__(self, store: InboxStore, fd: int, st: os.stat_result, result: DrainResult):
        self.store, self.fd, self.st, self.result = store, fd, st, result
        self.splitter = _splitter(0, skipping=False)
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
        self.splitter = _splitter(offset, skipping=skipping)
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
        data = os.pread(self.fd, chunk, self.splitter.fed)
        if not data:
            return False
        self.result.bytes_read += len(data)
        self.splitter.feed(data)
        items = self.splitter.read_all()
        resume, skipping = self.splitter.offset, self.splitter.skipping
        if items or resume != self.committed:
            return self._commit(items, resume, skipping, collect)
        return True

    def _commit(self, items: list[PairItem], resume: int, skipping: bool, collect: bool) -> bool:
        store, result = self.store, self.result
        now = time.time()
        with store.transaction():
            state = store.offset_state(result.run_id)
            if state is not None and (state.offset != self.committed or state.status != STATUS_OK):
                raise _Moved(state)
            fresh = _unstored(store, result.run_id, items)
            accepted, rejected = build_rows(fresh)
            store.insert_rows(result.run_id, now, accepted, rejected)
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
            run_id = result.run_id
            stored = [StoredMessage.accepted(run_id, now, row) for row in accepted]
            if rejected:
                stored += [StoredMessage.rejected_row(run_id, now, row) for row in rejected]
                stored.sort(key=_by_offset)
            result.messages.extend(stored)
        return True


def _unstored(store: InboxStore, run_id: str, items: list[PairItem]) -> list[PairItem]:
    """The chunk's lines that have no row yet.

    Rows of a run are written only here, one per line, at the line's offset in the
    run's inbox, so as many rows in the chunk's offset range as it has lines means
    every line is stored: one index count instead of fetching each offset.
    """
    if not items:
        return items
    low, high = items[0][0], items[-1][0] + 1
    stored = store.count_offsets(run_id, low, high)
    if not stored:
        return items
    if stored == len(items):
        return []
    seen = store.existing_offsets(run_id, low, high)
    return [item for item in items if item[0] not in seen]


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
    unfinished: Unfinished | None = None,
) -> DrainResult:
    """Store every new complete line of ``path`` for ``run_id``; return what happened.

    ``collect`` keeps the newly stored rows in ``result.messages``; ``max_bytes``
    bounds the bytes read in this call (``result.more`` says whether more is
    waiting). A missing file gives status ``missing`` and changes nothing; a symlink,
    FIFO or other unsafe file in its place is refused with ``OSError`` at once (never
    followed, never blocked on; see :mod:`tether.fsafe`). Database and read errors
    (``sqlite3.Error``, ``OSError``) propagate; what was committed before them stays
    committed. ``unfinished`` (a live tail's, kept between its calls) spares reading an
    unfinished last line again before its newline has come.
    """
    result = DrainResult(run_id=run_id, path=os.fspath(path))
    drain_into(
        result,
        store,
        collect=collect,
        chunk_bytes=chunk_bytes,
        max_bytes=max_bytes,
        unfinished=unfinished,
    )
    return result


def drain_into(
    result: DrainResult,
    store: InboxStore,
    *,
    collect: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    max_bytes: int | None = None,
    unfinished: Unfinished | None = None,
) -> None:
    """:func:`drain_file` filling ``result`` as it goes (kept even if this raises)."""
    try:
        fd = fsafe.open_path(result.path, os.O_RDONLY)  # never blocks, never follows a link
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
        if unfinished is not None and _still_unfinished(job, unfinished, chunk_bytes):
            return
        _run(job, chunk_bytes, max_bytes, collect)
        if unfinished is not None:
            _remember(job, unfinished)
    finally:
        os.close(fd)


def _still_unfinished(job: _FileDrain, unfinished: Unfinished, chunk_bytes: int) -> bool:
    """True when the last line known unfinished at the stored offset still has no
    newline and is not yet over the limit: only the bytes appended since are looked at
    (and let go), so a line written a byte at a time costs its length, not its square."""
    start, end = job.committed, job.st.st_size
    if unfinished.offset != start or job.splitter.skipping or end - start > MAX_MESSAGE_BYTES:
        return False
    position = max(unfinished.scanned, start)
    while position < end:
        data = os.pread(job.fd, min(chunk_bytes, end - position), position)
        if not data or b"\n" in data:
            return False
        position += len(data)
    unfinished.scanned = end
    return True


def _remember(job: _FileDrain, unfinished: Unfinished) -> None:
    """After a call that read to the end of the file: where its unfinished line starts."""
    held = job.splitter.held and not job.result.more
    unfinished.offset = job.committed if held else -1
    unfinished.scanned = job.splitter.fed if held else 0


def _run(job: _FileDrain, chunk_bytes: int, max_bytes: int | None, collect: bool) -> None:
    """Read on in chunks until the end of the file, or until ``max_bytes`` are read *and*
    the stored offset has moved: a call always makes progress. A line longer than the
    budget is read on to its newline (at most the line limit; past it the splitter skips
    it, and the offset moves past what it skipped), so the next call never starts again
    from the same offset to stop at the same place (a 1.1 MB line under a 1 MiB slice
    did that for ever). Memory stays bounded by the line limit plus a chunk."""
    budget = max_bytes
    started = job.committed
    while True:
        if budget is not None and budget <= 0 and job.committed != started:
            job.result.more = True
            return
        size = chunk_bytes if budget is None or budget <= 0 else min(chunk_bytes, budget)
        before = job.result.bytes_read
        try:
            if not job.step(size, collect):
                return
        except _Moved as moved:
            if not job.start(moved.state):
                return
        if budget is not None:
            budget -= job.result.bytes_read - before
