"""One file watcher for every run a process supervises, and one loop that waits on it.

Theory of operation: a :class:`~tether.transports.watch.FileWatcher` hands each change
to one waiter, so a process must have a single waiter that dispatches. The hub owns the
process's shared watcher and a daemon thread that blocks in ``wait_sync`` and, for each
changed path, calls the callbacks subscribed to it. The watcher is not thread-safe, so
only the hub thread touches it: (un)subscribing queues a request and wakes the thread.
Callbacks run on the hub thread;
asyncio users subscribe with :meth:`WatchHub.subscribe_event`, which sets an
``asyncio.Event`` on its own loop thread-safely. A thread (not an asyncio task) keeps the
hub independent of event loops: ``tether.run`` (one ``asyncio.run`` per call), the sync
handle (a loop in its own thread) and an application's loop all share it.

A process that runs one event loop for its whole life (the daemon) builds its hub with
``WatchHub(loop=loop)`` instead: the same dispatch then runs in that loop's reader
callback for the watcher's descriptors (registered once, not per wait) and the callbacks
run on the loop's thread, so a change reaches its subscriber with no thread hand-off (no
GIL hand-over between two busy threads, no wake-up of the loop from outside) and no task
switch. (Un)subscribe on that loop's thread then.

Readers must cope with spurious wake-ups and should still re-check on a slow timer: the
watcher reports "maybe changed" and a polled directory is seen at the poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tether.transports.watch import FileWatcher
from tether.wire.limits import POLL_BUSY_S

Callback = Callable[[Path], None]
log = logging.getLogger("tether.runtime.parent.hub")

# How long the hub thread blocks when nothing happens: for ever (None). It wakes on a
# change, on (un)subscribe and on close (each calls the watcher's wake), and a polled
# directory bounds the wait by the watcher's own poll interval.
_IDLE_WAIT_S: Final = None


class WatchHub:
    """Dispatch file changes from one shared watcher to many subscribers."""

    def __init__(
        self, watcher: FileWatcher | None = None, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.watcher = watcher if watcher is not None else FileWatcher(poll_interval=POLL_BUSY_S)
        self.loop = loop  # set: dispatch on this loop, callbacks on its thread
        self._lock = threading.Lock()
        self._subs: dict[Path, dict[int, Callback]] = {}
        self._ids = itertools.count(1)
        self._ops: list[tuple[bool, Path]] = []  # (watch?, path), applied by the hub thread
        self._thread: threading.Thread | None = None
        self._closed = False
        # on a loop: the descriptors registered with it, and the next poll's timer
        self._readers: tuple[int, ...] | None = None
        self._poll_timer: asyncio.TimerHandle | None = None

    def subscribe(self, path: str | os.PathLike[str], callback: Callback) -> int:
        """Call ``callback(path)`` (on the hub thread, or on :attr:`loop`'s thread) whenever
        ``path`` may have changed."""
        key = Path(os.path.abspath(path))
        token = next(self._ids)
        with self._lock:
            if self._closed:
                raise RuntimeError("WatchHub is closed")
            if key not in self._subs:
                self._ops.append((True, key))
            self._subs.setdefault(key, {})[token] = callback
            self._start_locked()
        self.watcher.wake()
        return token

    def subscribe_event(self, path: str | os.PathLike[str], event: asyncio.Event) -> int:
        """Set ``event`` on the running loop whenever ``path`` may have changed."""
        loop = asyncio.get_running_loop()

        def wake(_: Path) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)

        return self.subscribe(path, wake)

    def unsubscribe(self, path: str | os.PathLike[str], token: int) -> None:
        key = Path(os.path.abspath(path))
        with self._lock:
            subs = self._subs.get(key)
            if subs is None:
                return
            subs.pop(token, None)
            if not subs:
                del self._subs[key]
                self._ops.append((False, key))
        self.watcher.wake()

    def subscriptions(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._subs.values())

    def _start_locked(self) -> None:
        if self.loop is not None:
            if self._readers is None:
                self._readers = ()
                self.loop.call_soon(self._on_loop)  # the first pass registers the readers
        elif self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="tether-watch", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while (added := self._apply_ops()) is not None:
            try:
                changed = added | self.watcher.wait_sync(0 if added else _IDLE_WAIT_S)
            except (RuntimeError, OSError):
                return  # the watcher was closed under us
            self._dispatch(changed)

    def _on_loop(self) -> None:
        """On :attr:`loop`: a watcher descriptor is readable (or a poll is due, or this is
        the first pass). Apply the (un)watches, collect, dispatch, and keep the readers and
        the poll timer as the watcher now needs them."""
        added = self._apply_ops()
        if added is None:  # closed (the watcher too)
            self._stop_on_loop()
            return
        try:
            changed = added | self.watcher.collect()
        except (RuntimeError, OSError):
            self._stop_on_loop()
            return
        self._dispatch(changed)
        self._arm_on_loop()

    def _arm_on_loop(self) -> None:
        loop = self.loop
        assert loop is not None
        fds = self.watcher.readable_fds()  # inotify may have failed over to polling
        if fds != self._readers:
            for fd in self._readers or ():
                if fd not in fds:
                    with contextlib.suppress(Exception):  # inotify failed: it is closed
                        loop.remove_reader(fd)
            for fd in fds:
                if fd not in (self._readers or ()):
                    loop.add_reader(fd, self._on_loop)
            self._readers = fds
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        due = self.watcher.poll_due_in()
        if due is not None:
            self._poll_timer = loop.call_later(due, self._on_loop)

    def _stop_on_loop(self) -> None:
        loop, readers = self.loop, self._readers or ()
        self._readers = None
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        if loop is not None and not loop.is_closed():
            for fd in readers:
                with contextlib.suppress(Exception):  # closed with the watcher already
                    loop.remove_reader(fd)

    @property
    def running(self) -> bool:
        """True while the hub dispatches (its thread, or its readers on the loop)."""
        if self.loop is not None:
            return self._readers is not None
        return self._thread is not None and self._thread.is_alive()

    def _apply_ops(self) -> set[Path] | None:
        """Apply the queued (un)watches; the newly watched paths (None once closed)."""
        with self._lock:
            if self._closed:
                self.watcher.close()
                return None
            ops, self._ops = self._ops, []
        added = set()
        for watch, path in ops:
            with contextlib.suppress(KeyError, OSError):
                if watch:
                    self.watcher.watch(path)
                    added.add(path)  # report once: it may have changed before the watch
                else:
                    self.watcher.unwatch(path)
        return added

    def _dispatch(self, changed: set[Path]) -> None:
        for path in changed:
            with self._lock:  # the watcher hands back the absolute paths we gave it
                subs = self._subs.get(path)
                if subs is None:
                    subs = self._subs.get(Path(os.path.abspath(path)), {})
                callbacks = list(subs.values())
            for callback in callbacks:
                try:
                    callback(path)
                except Exception:  # one subscriber must not stop the others' wake-ups
                    log.exception("a watch callback for %s failed", path)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self.loop is not None:
            if self._readers is None:
                self.watcher.close()
                return
            # Stop at once: callbacks may not run again after close (nor the watcher be
            # read) even if the loop never runs another pass.
            self._stop_on_loop()
            self.watcher.close()
            return
        self.watcher.wake()
        thread = self._thread
        if thread is None or not thread.is_alive():
            self.watcher.close()
        elif thread is not threading.current_thread():
            thread.join(timeout=2.0)


_shared: list[WatchHub] = []
_shared_lock = threading.Lock()


def shared_hub() -> WatchHub:
    """The process's hub (and so its one FileWatcher), created on first use."""
    with _shared_lock:
        if not _shared or _shared[0]._closed:
            _shared[:] = [WatchHub()]
        return _shared[0]
