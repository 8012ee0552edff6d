"""One daemon agent: a long-lived wire child, its event log tailed live, its registry row.

Theory of operation. The child runs in its own session (stdin ``/dev/null``, stdout and
stderr appended to the run's ``stderr.log``), so it never gets SIGHUP or SIGPIPE from the
daemon and outlives a killed one. The daemon only appends controls to ``control.jsonl``
and reads ``events.jsonl``; both are plain files, so nothing is lost while no daemon runs.

The rules that supervise the run (ready, ack, cancel and exit grace, deadline, the
verdict) are the sans-IO :class:`~tether.runtime.parent.supervise.RunWatch`, the same one the
parent API uses; :class:`AgentRun` is its I/O driver. One pump task per agent loops:

1. read a bounded slice of ``events.jsonl`` (woken by the process's shared
   :class:`~tether.runtime.parent.hub.WatchHub`; an idle agent has no timer), validated and
   mirrored by the watch; resolve control acks and asks
   (:class:`~tether.daemon.fleet.turns.TurnTracker`), hand each event to live followers;
2. drain the inbox into SQLite when it changed, and queue its messages for the agent's
   channel;
3. persist ``(event_offset, last_seq, state, turn, usage, snapshot)`` in one registry
   update: at once when the state or turn changed, else at most every
   :data:`PERSIST_EVERY_S`. The snapshot is the mirror's state at exactly that offset, so
   a restarted daemon rebuilds the mirror from it and resumes reading at the offset;
4. do what the watch says: wait (or only yield, while more events are waiting, so the
   timers run under a flood), end the process group, read what is left, or finish.

The process is watched with a pidfd (``pidfd_open``), which works the same for a child
this daemon started and for one a previous daemon started (re-adopted after a restart):
no SIGCHLD handling, no thread per child.

Agents are never closed for being idle: a ready child waits for controls until
``stop``/``rm`` (or its deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sqlite3
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import fsafe, procs
from tether.daemon.fleet.fno_shapes import reference_base
from tether.daemon.fleet.followers import Follower
from tether.daemon.fleet.registry import AgentRecord, AgentRegistry
from tether.daemon.fleet.turns import Outcome, TurnTracker
from tether.runtime.parent.finaltext import full_text
from tether.runtime.parent.forkserver import ForkedChild
from tether.runtime.parent.hub import WatchHub
from tether.runtime.parent.launch import monotonic_at
from tether.runtime.parent.mirror import ChannelError, RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import RunDir, write_private_text
from tether.runtime.parent.supervise import Drain, Finish, RunWatch, Send, Terminate, Wait
from tether.runtime.parent.watchio import drain, end_group, read_slice, stderr_tail
from tether.transports.tail import FileTail
from tether.transports.wake import ControlWriter, WakePipe, open_wake_fifo
from tether.wire import AnyEvent, ControlAck, Ready, Rejection, TurnComplete
from tether.wire.session import ControlKind, RunStatus, State
from tether.wire.usage import add_usage

log = logging.getLogger("tether.daemon.fleet.verbs")

MAX_NOTES: Final = 20
PERSIST_EVERY_S: Final = 1.0  # persist the offset at most this often when only it moved
# A turn that has just started is saved (running, its turn number) once it has run this
# long: most turns a follow-up starts end sooner, and their end is then the one update
# (one registry write per short turn instead of two). Nothing is lost meanwhile: a
# restarted daemon replays the events after the saved offset.
RUNNING_SAVE_S: Final = 0.05
# The daemon's agents wait for controls as long as they like, and an idle one costs no
# wake-up at all: its process is watched by a pidfd, its files by the shared hub (which
# polls by itself when it must), so nothing is re-checked on a timer.
DAEMON_TIMEOUTS: Final = Timeouts(tick_s=None)
# Without a pidfd (an old kernel) the pid is looked at this often instead.
PID_CHECK_S: Final = 5.0


# -- the agent ----------------------------------------------------------------------------


class AgentRun:
    """One supervised agent; see the module docstring. Built by the supervisor."""

    def __init__(
        self,
        record: AgentRecord,
        *,
        registry: AgentRegistry,
        hub: WatchHub,
        timeouts: Timeouts,
        mirror: RunMirror,
        inbox: Any = None,
        popen: subprocess.Popen[bytes] | ForkedChild | None = None,
        adopted: bool = False,
        control: ControlWriter | None = None,
        watch: bool = True,
        on_inbox: Callable[[AgentRun, list[dict[str, Any]]], None] | None = None,
        on_end: Callable[[AgentRun], Any] | None = None,
    ) -> None:
        self.record = record
        self.name = record.name
        self.run = RunDir(Path(record.run_dir).name, Path(record.run_dir))
        self.reference = reference_base(record, self.run.run_id)  # the row never changes
        self.pid = record.pid
        self.timeouts = timeouts
        self.mirror = mirror
        deadline = record.deadline_at
        self.watch = RunWatch(
            mirror,
            timeouts,
            now=time.monotonic(),
            deadline=None if deadline is None else monotonic_at(deadline),
        )
        self.usage: dict[str, int] = {
            k: v for k, v in (record.usage or {}).items() if type(v) is int
        }
        self.adopted = adopted
        self.orphaned = False
        self.status: str | None = None  # the final status once ended
        self.error: str | None = None
        self.exit_code: int | None = None
        self.final_text: str | None = None
        self.ended_at: float | None = None
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self.tracker = TurnTracker()
        self.channel_stats: dict[str, Any] = {"pushed": 0, "failed": 0}
        self.followers: set[Follower] = set()
        self._registry = registry
        self._hub = hub
        self._inbox = inbox
        self._popen = popen
        self._on_inbox = on_inbox
        self._on_end = on_end
        self._tail = FileTail(self.run.events, offset=record.event_offset)
        # Opened once, before the child started (else on the first send, after a restart).
        self._control = control
        self._rewake: WakePipe | None = None  # an adopted child's wake FIFO (see start)
        self._persisted_at = 0.0
        self._wake = asyncio.Event()
        self._inbox_dirty = inbox is not None
        # Bumped after every inbox drain: what the daemon caches of the inbox store (its
        # open questions) is current while this is unchanged.
        self.inbox_version = 0
        self._asks: dict[int, asyncio.Future[Outcome]] = {}
        self._acks: dict[int, asyncio.Future[ControlAck]] = {}
        self._proc_done = self.pid is None or not watch
        self._owns_group = not self._proc_done  # a process seen alive: its group is ours to end
        if self._proc_done:
            self.watch.process_exited(None)
        self._pidfd: int | None = None
        self._exit_task: asyncio.Task[None] | None = None
        self._urgent = False
        self._urgent_at = 0.0  # when the state or turn last moved away from the saved one
        self._persisted = (record.event_offset, mirror.state, mirror.turn)
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tokens: list[tuple[Path, int]] = []
        self._task: asyncio.Task[None] | None = None
        # agent.status's encoded answer and what it was built from (see status_stamp)
        self.status_cache: tuple[tuple[Any, ...], msgspec.Raw] | None = None

    # -- public -----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def ended(self) -> bool:
        return self._ended.done()

    @property
    def state(self) -> str:
        """The final status once ended; before, the live state (never terminal until the
        answer has been read)."""
        return self.status if self.status is not None else self.watch.live_state.value

    @property
    def last_seq(self) -> int:
        return self.mirror.receiver.seq

    @property
    def event_offset(self) -> int:
        return self._tail.offset

    def mark_ended(self) -> None:
        """An agent whose run ended before this daemon started: its row is its history."""
        record = self.record
        self.status, self.error, self.exit_code = record.state, record.detail, record.exit_code
        self.ended_at = record.updated_at
        self._ended.set_result(None)
        self._set_started()

    def start(self) -> None:
        """Subscribe to the files, watch the process, start the pump."""
        loop = asyncio.get_running_loop()
        for path, mark_inbox in ((self.run.events, False), (self.run.inbox, True)):
            if mark_inbox and self._inbox is None:
                continue
            token = self._hub.subscribe(path, self._threadsafe_poke(loop, mark_inbox))
            self._tokens.append((path, token))
        if not self._proc_done:
            self._watch_process(loop)
            if self._control is None:
                self._take_over_wake()
        if isinstance(self.mirror.state, State) and self.mirror.state is not State.STARTING:
            self._set_started()
        self._task = asyncio.create_task(self._pump(), name=f"tether-agent-{self.name}")

    async def wait_started(self, timeout: float) -> None:  # noqa: ASYNC109
        """Until the child is ready (or the run ended, or ``timeout``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._started), timeout)

    async def wait_ended(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        if timeout is None:
            await asyncio.shield(self._ended)
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._ended), timeout)
        return self.ended

    def catch_up(self) -> None:
        """Read what the child wrote so far, so the mirror is current (before a decision)."""
        if not self.ended:
            self._read_events()

    def send(self, kind: ControlKind, **fields: Any) -> int:
        """Append a control; returns its seq.

        Raises ``ValueError`` when it cannot encode, ``LookupError`` when the control file
        cannot be written (the child swapped it: the run then fails).
        """
        sent = self.watch.send(kind, time.monotonic(), **fields)
        if isinstance(sent, Rejection):
            raise ValueError(sent.reason)
        self._append(sent.line)
        self._wake.set()  # the watch has a new timer (its ack, a cancel's grace)
        return sent.seq

    def _take_over_wake(self) -> None:
        """An adopted child lost its wake-up pipe with the previous daemon and listens on
        its run's wake FIFO instead: open it and say we are here (it drops its watcher)."""
        self._rewake = open_wake_fifo(self.run.path)
        if self._rewake is not None:
            self._rewake.wake()

    def _append(self, line: bytes) -> None:
        try:
            if self._control is None:
                file = fsafe.AppendFile(self.run.control)
                self._control = ControlWriter(file, self._rewake, fifo_dir=self.run.path)
                self._rewake = None
            self._control.append(line)
        except OSError as exc:  # the child swapped its control file (a FIFO, a symlink...)
            self.fail_soon("failed", f"cannot write the control file: {exc.strerror or exc}")
            raise LookupError(f"its control file cannot be written: {exc.strerror}") from None

    def ack_future(self, seq: int) -> asyncio.Future[ControlAck]:
        """Resolved with the ack of ``seq``; fails with ``LookupError`` if the run ends first."""
        future = self._acks.get(seq)
        if future is None:
            future = self._acks[seq] = asyncio.get_running_loop().create_future()
            if self.ended:
                self._settle_ack(seq, None)
        return future

    def ask(self, kind: ControlKind, text: str) -> tuple[int, asyncio.Future[Outcome]]:
        """Send ``text`` as ``kind`` and track the turn that answers it."""
        seq = self.send(kind, text=text)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._asks[seq] = future
        self.tracker.expect(seq, opens_turn=kind is ControlKind.PROMPT)
        return seq, future

    def expect_answer(self, seq: int) -> asyncio.Future[Outcome]:
        """Track an already sent prompt (the spawn task) like :meth:`ask`."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._asks[seq] = future
        self.tracker.expect(seq, opens_turn=True)
        return future

    def forget_ask(self, seq: int) -> None:
        self.tracker.forget(seq)
        future = self._asks.pop(seq, None)
        if future is not None and not future.done():
            future.cancel()

    def follow(self, after_seq: int) -> Follower:
        follower = Follower(after_seq)
        if self.ended:
            follower.end()
        else:
            self.followers.add(follower)
        return follower

    def unfollow(self, follower: Follower) -> None:
        self.followers.discard(follower)

    async def kill(self, reason: str) -> None:
        """End the child's process group now; the run fails with ``reason``."""
        if not self.ended:
            self.fail_soon("failed", reason)
            await self.wait_ended(self.timeouts.kill_grace_s + self.timeouts.exit_grace_s + 5)

    async def detach(self) -> None:
        """Stop supervising (daemon shutdown) and persist; the child keeps running."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self.ended:
            self._persist(force=True)
        self._release()

    def status_stamp(self) -> tuple[Any, ...] | None:
        """Everything :meth:`status_dict` (and the reference's keys beside it) is built from
        that can change, or None when that is not cheap to tell (notes or channel counters,
        which change in place): equal stamps, equal answers."""
        if self.notes or self.record.channel_id:
            return None
        mirror = self.mirror
        return (
            self.status,
            self.watch.live_state,
            mirror.turn,
            mirror.receiver.seq,
            self.orphaned,
            self.final_text,
        )

    def status_dict(self) -> dict[str, Any]:
        record = self.record
        data: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "turn": self.mirror.turn,
            "pid": self.pid,
            "run_id": self.run_id,
            "run_dir": record.run_dir,
            "usage": self.usage,
            "created_at": record.created_at,
            "started_at": record.started_at,
            "last_seq": self.last_seq,
            "provider": record.provider,
            "model": record.model,
            "channel_id": record.channel_id,
            "adopted": self.adopted,
        }
        if self.ended:
            data.update(ended_at=self.ended_at, exit_code=self.exit_code, error=self.error)
        elif self.error:
            data["error"] = self.error
        if record.channel_id:
            data["channel"] = dict(self.channel_stats)
        if self.notes:
            data["notes"] = list(self.notes)
        return data

    # -- the pump ---------------------------------------------------------------------

    def _threadsafe_poke(
        self, loop: asyncio.AbstractEventLoop, inbox: bool
    ) -> Callable[[Path], None]:
        if self._hub.loop is loop:  # the hub dispatches on our loop: poke directly

            def poke_here(_: Path) -> None:
                self._poke(inbox)

            return poke_here

        def poke(_: Path) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._poke, inbox)

        return poke

    def _poke(self, inbox: bool) -> None:
        if inbox:
            self._inbox_dirty = True
        elif self._acks:
            # A caller waits for an ack: read now, in the watcher's callback, so the call
            # that waits for it runs in the next loop pass, ahead of the pumps this change
            # woke (their turns' events can wait a pass; the ack is what someone is timing).
            self.catch_up()
        else:
            # Woken a pass later than a caller's ack read in this same dispatch, whatever
            # order the watcher reported the files in.
            asyncio.get_running_loop().call_soon(self._wake.set)
            return
        self._wake.set()

    def _watch_process(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.pid is None:
            self._proc_done = True
            return
        if isinstance(self._popen, ForkedChild):  # its status comes from the fork server
            self._exit_task = loop.create_task(self._wait_forked(self._popen))
            return
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self._on_exit()
            return
        except OSError as exc:  # no pidfds: the pid is checked every PID_CHECK_S instead
            log.warning("agent %s: cannot watch pid %d: %s", self.name, self.pid, exc)
            return
        loop.add_reader(self._pidfd, self._on_exit)

    async def _wait_forked(self, child: ForkedChild) -> None:
        await child.wait()
        if not self._proc_done:
            self._on_exit()

    def _on_exit(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._popen is not None:
            self.exit_code = self._popen.poll()
        self._proc_done = True
        self.watch.process_exited(self.exit_code)
        self._wake.set()

    def _check_pid(self) -> None:
        """Fallback without a pidfd: is our process still there?"""
        if self._pidfd is None and not self._proc_done and self.pid is not None:
            if isinstance(self._popen, ForkedChild):
                return  # _wait_forked
            if self._popen is not None:
                if self._popen.poll() is not None:
                    self._on_exit()
            elif not procs.group_has_live_members(self.pid):
                self._on_exit()

    async def _pump(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the agent must end with a status, whatever happens
            log.exception("agent %s: supervisor error", self.name)
            self.watch.fail("failed", f"internal error in the daemon: {exc!r}")
            with contextlib.suppress(Exception):
                await self._terminate(self.timeouts.kill_grace_s)
        await self._end()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            more = self._read_events()
            if self._inbox_dirty:
                self._inbox_dirty = False
                await self._drain_inbox()
            self._check_pid()
            for action in self.watch.next(time.monotonic()):
                if isinstance(action, Send):
                    with contextlib.suppress(LookupError):  # the run fails on the next turn
                        self._append(action.line)
                elif isinstance(action, Wait):
                    if self._urgent and not self._saving_later():
                        await asyncio.sleep(0)  # the calls this read answered write first
                    self._persist()
                    await self._wait(action.until, more)
                elif isinstance(action, Terminate):
                    await self._terminate(action.grace_s)
                elif isinstance(action, Drain):
                    await drain(
                        self._tail, self.watch, self._on_line, self._channel_error, action.limit
                    )
                elif isinstance(action, Finish):
                    return

    async def _wait(self, until: float, more: bool) -> None:
        if more:  # a backlog: yield to the other agents and clients, then read on
            await asyncio.sleep(0)
            return
        if self._tail.offset != self._persisted[0]:
            until = min(until, self._persisted_at + PERSIST_EVERY_S)
        if self._urgent:  # a turn start saved later (see RUNNING_SAVE_S)
            until = min(until, self._urgent_at + RUNNING_SAVE_S)
        if self._pidfd is None and self._exit_task is None and not self._proc_done:
            until = min(until, time.monotonic() + PID_CHECK_S)  # nothing else says it exited
        if until == math.inf:  # nothing is due: only an event wakes this agent
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.001, until - time.monotonic())):
                await self._wake.wait()

    async def _terminate(self, grace_s: float) -> None:
        """End what is left of the process group (only one this daemon saw alive)."""
        if self._owns_group and self.pid is not None:
            target: procs.Target = self._popen if self._popen is not None else self.pid
            await end_group(target, grace_s)
            if not self._proc_done:
                self._on_exit()
        self.watch.terminated(self.exit_code)

    def fail_soon(self, status: RunStatus, reason: str) -> None:
        """End the run with ``status`` (its process group too) from the pump."""
        self.watch.fail(status, reason)
        self._wake.set()

    # -- events -----------------------------------------------------------------------

    def _read_events(self) -> bool:
        """Apply a bounded slice of the event file; True when more is waiting."""
        return read_slice(self._tail, self.watch, self._on_line, self._channel_error)

    def _on_line(self, event: AnyEvent, data: bytes) -> None:
        self._on_event(event)
        for follower in self.followers:
            follower.push(event.seq, data)
        if not self._urgent and (self.mirror.state, self.mirror.turn) != self._persisted[1:]:
            self._urgent, self._urgent_at = True, time.monotonic()

    def _on_event(self, event: AnyEvent) -> None:
        if isinstance(event, ControlAck) and isinstance(event.ref, int):
            self._settle_ack(event.ref, event)
        elif isinstance(event, Ready):
            self._set_started()
        elif isinstance(event, TurnComplete) and isinstance(event.usage, dict):
            add_usage(self.usage, event.usage)
        for outcome in self.tracker.feed(event):
            self._settle_ask(outcome)

    def _settle_ack(self, seq: int, ack: ControlAck | None) -> None:
        future = self._acks.pop(seq, None)
        if future is None or future.done():
            return
        if ack is None:
            future.set_exception(LookupError(f"the run ended ({self.state}) before the ack"))
            future.exception()  # nobody may be waiting any more
        else:
            future.set_result(ack)

    def _settle_ask(self, outcome: Outcome) -> None:
        future = self._asks.pop(outcome.seq, None)
        if future is not None and not future.done():
            future.set_result(outcome)

    def _set_started(self) -> None:
        if not self._started.done():
            self._started.set_result(None)

    def _channel_error(self, error: ChannelError) -> None:
        self._note(error.reason)

    def _note(self, text: str) -> None:
        log.info("agent %s: %s", self.name, text)
        self.notes.append(text)

    # -- inbox ------------------------------------------------------------------------

    async def _drain_inbox(self) -> None:
        if self._inbox is None:
            return
        messages = [message for message, _ in await self._inbox.drain()]
        self.inbox_version += 1
        if self._inbox.more:  # one bounded slice a pass: come back for the rest
            self._inbox_dirty = True
            self._wake.set()
        if messages and self._on_inbox is not None:
            self._on_inbox(self, messages)

    # -- persistence --------------------------------------------------------------------

    def _persist(self, *, force: bool = False, **extra: Any) -> None:
        now = time.monotonic()
        offset = self._tail.offset
        moved = offset != self._persisted[0]
        due = moved and now - self._persisted_at >= PERSIST_EVERY_S
        if not (force or self._urgent or due or extra):
            return
        if not (force or due or extra) and self._saving_later(now):
            return
        fields = {
            "state": self.state,
            "turn": self.mirror.turn,
            "usage": self.usage,
            "last_seq": self.last_seq,
            "event_offset": offset,
            "snapshot": self.mirror.snapshot(),
            **extra,
        }
        try:
            self._registry.save(self.name, **fields)
        except KeyError:
            pass  # removed meanwhile (rm --force)
        except sqlite3.Error as exc:
            self._note(f"registry not updated: {exc}")
            return
        self._urgent = False
        self._persisted_at = now
        self._persisted = (offset, self.mirror.state, self.mirror.turn)

    def _saving_later(self, now: float | None = None) -> bool:
        """True while the only change to save is a turn that started under RUNNING_SAVE_S
        ago (its end, or that much time, saves it)."""
        if not self._urgent or self.mirror.state is not State.RUNNING:
            return False
        return (time.monotonic() if now is None else now) - self._urgent_at < RUNNING_SAVE_S

    # -- ending -----------------------------------------------------------------------

    async def _end(self) -> None:
        verdict = self.watch.verdict(stderr_tail(self.run), str(self.run.path))
        status, error, result = verdict.status, verdict.error, verdict.result
        if result is not None:
            text, _ = full_text(result, self.run.path)
            self.final_text = text
            if text:
                with contextlib.suppress(OSError):
                    write_private_text(self.run.final, text)
        # only now, with the answer read, does the agent say it has ended
        self.status, self.error, self.ended_at = status, error, time.time()
        for outcome in self.tracker.fail_all(f"the run ended ({status}) before answering"):
            self._settle_ask(outcome)
        for seq in list(self._acks):
            self._settle_ack(seq, None)
        self._persist(force=True, exit_code=self.exit_code, detail=error)
        self._release()
        if not self._ended.done():
            self._ended.set_result(None)
        self._set_started()
        for follower in self.followers:
            follower.end()
        self.followers.clear()
        if self._inbox is not None:
            with contextlib.suppress(Exception):
                await self._drain_inbox()
                await self._inbox.close()
            self.inbox_version += 1  # close() stored the rest
        if self._on_end is not None:
            with contextlib.suppress(Exception):
                await self._on_end(self)

    def _release(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._rewake is not None:
            self._rewake.close()
            self._rewake = None
        for path, token in self._tokens:
            self._hub.unsubscribe(path, token)
        self._tokens.clear()
        if self._exit_task is not None:
            self._exit_task.cancel()
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._tail.close()


__all__ = ["AgentRun"]
