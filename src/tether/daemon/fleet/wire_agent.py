"""One daemon agent over the wire: a long-lived child driven by the one run driver.

Theory of operation. The child runs in its own session (stdin ``/dev/null``, stdout and
stderr appended to the run's ``stderr.log``), so it never gets SIGHUP or SIGPIPE from the
daemon and outlives a killed one. Its run is a
:class:`~tether.runtime.parent.driver.LocalRunHandle`, the same driver :func:`tether.spawn`
uses (the same watch, the same pre-check, the same acks); what the daemon adds rides on it
as observers:

- this :class:`WireAgent` itself: the usage summed over turns, the asks waiting for
  their turn's answer (:class:`~tether.daemon.fleet.turns.TurnTracker`), the live
  followers of ``agent.events``, the inbox version the question cache is keyed by;
- its :class:`~tether.daemon.fleet.checkpoint.Checkpoint`: the registry row, so a
  restarted daemon resumes at the saved offset with the mirror as it was there;
- the run index row (:class:`~tether.runtime.parent.sidecars.Recorder`);
- what the composition root adds (a Claude Code agent's channel forwarding).

An agent whose run ended before this daemon started has no driver: its row is its
history. Agents are never closed for being idle: a ready child waits for controls until
``stop``/``rm`` (or its deadline).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
from msgspec import UNSET

from tether.daemon.fleet.checkpoint import Checkpoint
from tether.daemon.fleet.fno_shapes import reference_base, wire_status
from tether.daemon.fleet.followers import Follower
from tether.daemon.fleet.registry import AgentRecord, AgentRegistry
from tether.daemon.fleet.replies import AgentStatus, ControlReply, StopReply
from tether.daemon.fleet.turns import Outcome, TurnTracker
from tether.daemon.rpc.methods import RpcFailure, invalid_status
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import RunEnded
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import RunDir
from tether.wire import TurnComplete
from tether.wire.session import ControlKind, State
from tether.wire.usage import add_usage

if TYPE_CHECKING:
    from tether.runtime.parent.driver import LocalRunHandle
    from tether.runtime.parent.outcome import RunResult
    from tether.wire import AnyEvent

__all__ = ["ACK_TIMEOUT_S", "DAEMON_TIMEOUTS", "WireAgent", "send_control"]

# The daemon's agents wait for controls as long as they like, and an idle one costs no
# wake-up at all: its process is watched by a pidfd, its files by the shared hub (which
# polls by itself when it must), so nothing is re-checked on a timer.
DAEMON_TIMEOUTS: Final = Timeouts(tick_s=None)
KILL_WAIT_EXTRA_S: Final = 5.0
ACK_TIMEOUT_S: Final = 30.0  # a control's ack, through the daemon


class WireAgent(Observer):
    """One supervised wire agent; see the module docstring. Built by the supervisor."""

    kind = "wire"

    def __init__(
        self,
        record: AgentRecord,
        handle: LocalRunHandle | None,
        *,
        registry: AgentRegistry,
        adopted: bool = False,
        orphaned: bool = False,
        queued: Callable[[WireAgent], Awaitable[None]] | None = None,
    ) -> None:
        self.record = record
        self.name = record.name
        self.run = RunDir(Path(record.run_dir).name, Path(record.run_dir))
        self.run_id = self.run.run_id  # read for every agent by every agent.list
        self.reference = reference_base(record, self.run_id)  # the row never changes
        self.handle = handle
        self.adopted = adopted
        self.orphaned = orphaned
        self.usage: dict[str, int] = {
            k: v for k, v in (record.usage or {}).items() if type(v) is int
        }
        self.tracker = TurnTracker()
        self.channel_stats: dict[str, Any] = {"pushed": 0, "failed": 0}
        self.followers: set[Follower] = set()
        # Bumped after every inbox drain: what the daemon caches of the inbox store (its
        # open questions) is current while this is unchanged.
        self.inbox_version = 0
        self._resumable: bool | None = None  # see resumable
        # Its row encoded once per change, for agent.status and agent.list alike, and what
        # it was built from (status_stamp, questions); keyed by whether the row carries the
        # final text (agent.status of an ended agent does, its agent.list row does not).
        self.row_cache: dict[bool, tuple[tuple[Any, ...], msgspec.Raw]] = {}
        # Bumped by everything that changes what status() shows (see status_stamp).
        self.row_version = 0
        self._noted = False  # the run has notes (they change in place: no cached row)
        self._channel = record.channel_id is not None  # its counters change in place too
        self._asks: dict[int, asyncio.Future[Outcome]] = {}
        self._final: str | None = None  # the final status once ended
        self.error: str | None = None
        self.exit_code: int | None = None
        self.ended_at: float | None = None
        self.checkpoint: Checkpoint | None = None
        self._leave_queue = queued  # queued (--max-running): how it leaves the queue
        if queued is not None:  # waiting its turn: no run yet, nothing ended
            pass
        elif handle is None:  # its run ended before this daemon started: the row is history
            self._final, self.error = record.state, record.detail
            self.exit_code, self.ended_at = record.exit_code, record.updated_at
        else:
            self.checkpoint = Checkpoint(
                self.name,
                registry,
                handle,
                usage=lambda: self.usage,
                note=handle.note,
                state=lambda: self.state,
            )
            handle.observe(self, self.checkpoint)

    # -- what the verbs read ----------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.record.pid

    @property
    def ended(self) -> bool:
        return self._final is not None

    @property
    def queued(self) -> bool:
        """It waits for a place to run (``tether daemon --max-running``)."""
        return self._leave_queue is not None

    @property
    def state(self) -> str:
        """The final status once ended; before, the live state (never terminal until the
        answer has been read)."""
        if self._final is not None:
            return self._final
        if self.handle is None:
            return "queued"
        return self.handle.live_state.value

    @property
    def mirror_state(self) -> State | None:
        """The mirrored state (None for a row of history)."""
        return None if self.handle is None else self.handle.mirror.state

    @property
    def finished(self) -> bool:
        """The run has ended, or the child has said its ``exit``."""
        if self.queued:
            return False
        return self.handle is None or self.ended or self.handle.mirror.finished

    @property
    def turn(self) -> int:
        return self.record.turn if self.handle is None else self.handle.mirror.turn

    @property
    def last_seq(self) -> int:
        return self.record.last_seq if self.handle is None else self.handle.mirror.receiver.seq

    @property
    def notes(self) -> list[str]:
        return [] if self.handle is None else self.handle.notes

    @property
    def final_text(self) -> str | None:
        return None if self.handle is None else self.handle.final_text

    def start(self) -> None:
        if self.handle is not None:
            self.handle.start()

    def catch_up(self) -> None:
        """Read what the child wrote so far, so the mirror is current (before a decision)."""
        if self.handle is not None and not self.ended:
            self.handle.catch_up()

    # -- controls and asks ------------------------------------------------------------

    def live(self) -> LocalRunHandle:
        """The run's handle; ``invalid_status`` while queued and once the run has ended."""
        if self.queued:
            raise invalid_status(f"agent {self.name!r} is queued: it has not started yet")
        self.catch_up()
        if self.handle is None or self.finished:
            raise invalid_status(f"agent {self.name!r} has ended ({self.state})")
        return self.handle

    def ask(self, kind: ControlKind, text: str) -> tuple[int, asyncio.Future[Outcome]]:
        """Send ``text`` as ``kind`` and track the turn that answers it."""
        seq = self.live().send_nowait(kind, text=text)
        return seq, self.expect_answer(seq, opens_turn=kind is ControlKind.PROMPT)

    def expect_answer(self, seq: int, *, opens_turn: bool = True) -> asyncio.Future[Outcome]:
        """Track an already sent prompt (the spawn task) like :meth:`ask`."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._asks[seq] = future
        self.tracker.expect(seq, opens_turn=opens_turn)
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
        handle = self.handle
        if handle is not None and not self.ended:
            handle.kill(reason)
            t = handle.timeouts
            await handle.wait_ended(t.kill_grace_s + t.exit_grace_s + KILL_WAIT_EXTRA_S)

    async def wait_ended(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        if self.handle is None or self.ended:
            return True
        await self.handle.wait_ended(timeout)
        return self.ended

    async def detach(self) -> None:
        """Stop supervising (daemon shutdown) and save; the child keeps running."""
        if self.handle is None or self.ended:
            return
        await self.handle.detach()
        if self.checkpoint is not None:
            self.checkpoint.stop()

    # -- observing the run ------------------------------------------------------------

    def on_event(self, event: AnyEvent, raw: bytes) -> None:
        self.row_version += 1  # the mirror moved: state, turn, last seq, usage
        if isinstance(event, TurnComplete) and isinstance(event.usage, dict):
            add_usage(self.usage, event.usage)
        for follower in self.followers:
            follower.push(event.seq, raw)
        for outcome in self.tracker.feed(event):  # every event: it follows the turns
            self._settle_ask(outcome)

    def on_inbox(self, messages: list[dict[str, Any]]) -> None:
        self.inbox_version += 1
        self.row_version += 1

    def on_note(self, text: str) -> None:
        self._noted = True
        self.row_version += 1

    async def on_end(self, result: RunResult) -> str | None:
        handle = self.handle
        assert handle is not None
        self.exit_code = handle.watch.exit_code
        # only now, with the answer read, does the agent say it has ended
        self.error, self.ended_at = result.error, handle.ended_at
        # gone when this daemon came (a reboot, a kill) with no exit of its own: stopped,
        # not failed; it can be resumed like any ended agent
        gone = self.orphaned and handle.mirror.exit is None and self.record.pid is not None
        self._final = "stopped" if gone else result.status
        for outcome in self.tracker.fail_all(f"the run ended ({result.status}) before answering"):
            self._settle_ask(outcome)
        for follower in self.followers:
            follower.end()
        self.followers.clear()
        self.inbox_version += 1  # the inbox was read to its end
        self.row_version += 1
        return None

    def _settle_ask(self, outcome: Outcome) -> None:
        future = self._asks.pop(outcome.seq, None)
        if future is not None and not future.done():
            future.set_result(outcome)

    # -- status -----------------------------------------------------------------------

    def status_stamp(self) -> tuple[Any, ...] | None:
        """What :meth:`status` shows changes only with what changes this stamp, or None when
        its row is not kept: no run here (queued, or history), a channel agent (its counters
        change in place), a run with notes. Equal stamps, equal rows.

        The row is read from the mirror (state, turn, last seq: moved only by events), the
        usage (summed from events), the end (``on_end``) and the notes, so the stamp is
        :attr:`row_version`, bumped by each of those, and :attr:`orphaned`. Touches this
        object alone: every ``agent.list`` reads it for each agent."""
        if self.handle is None or self._noted or self._channel:
            return None
        return (self.row_version, self.orphaned)

    def status(self) -> AgentStatus:
        record = self.record
        wire = wire_status(self.state, orphaned=self.orphaned)
        ended = self.ended
        return AgentStatus(
            name=self.name,
            state=self.state,
            turn=self.turn,
            pid=self.pid,
            run_id=self.run_id,
            run_dir=record.run_dir,
            usage=self.usage,
            created_at=record.created_at,
            started_at=record.started_at,
            last_seq=self.last_seq,
            provider=record.provider,
            model=record.model,
            channel_id=record.channel_id,
            adopted=self.adopted,
            status=wire,
            live_status=wire,
            **self.reference,
            ended_at=self.ended_at if ended else UNSET,
            exit_code=self.exit_code if ended else UNSET,
            error=self.error if ended else UNSET,
            notes=list(self.notes) if self.notes else UNSET,
            resumable=self.resumable if ended else UNSET,
            **_worktree_fields(record.worktree),
        )

    @property
    def resumable(self) -> bool:
        """An ended agent: whether a follow-up resumes it (read once: its files are done)."""
        if self._resumable is None:
            from tether.daemon.fleet.worktrees import resumable_run

            self._resumable = resumable_run(self.record.argv, self.record.run_dir)
        return self._resumable

    def wire(self) -> WireAgent:
        return self

    async def stop(self, mode: str, timeout_s: float, note: str | None) -> StopReply:
        """Send ``mode`` (close, finalize, cancel), then wait up to ``timeout_s`` for the end.
        A run that has ended, or whose child said its ``exit``, answers ``already_exited``
        with its final status."""
        kind = ControlKind(mode)
        if self._leave_queue is not None:  # never started: it leaves the queue, cancelled
            await self._leave_queue(self)
            return StopReply(name=self.name, mode=mode, state="cancelled", ended=True)
        self.catch_up()
        if self.finished:
            await self.wait_ended(timeout_s)  # an exit was read: its end is moments away
            return StopReply(name=self.name, already_exited=True, state=self.state)
        fields = {"note": note} if note and kind is ControlKind.FINALIZE else {}
        sent = await send_control(self, kind, fields)
        ended = await self.wait_ended(timeout_s)
        return StopReply(
            name=self.name,
            mode=mode,
            seq=sent.seq,
            ack=sent.ack,
            reason=sent.reason,
            state=self.state,
            ended=ended,
            stopped=True,
            short_id=self.run_id,
        )


async def send_control(agent: WireAgent, kind: ControlKind, fields: dict[str, Any]) -> ControlReply:
    """Send one control to ``agent``'s run and answer the child's ack (a ``rejected`` one
    too: a refused control is an answer, as :meth:`tether.RunHandle.send` returns it).
    A run that has ended is ``invalid_status``; a control that does not encode,
    ``invalid_params``; no ack within :data:`ACK_TIMEOUT_S`, ``internal``."""
    handle = agent.live()
    try:
        async with asyncio.timeout(ACK_TIMEOUT_S):
            ack = await handle.send(kind, **fields)
    except RunEnded as exc:
        raise invalid_status(f"agent {agent.name!r}: {exc}") from None
    except ValueError as exc:
        raise RpcFailure(ErrorCode.INVALID_PARAMS, f"cannot send {kind}: {exc}") from None
    except TimeoutError:
        raise RpcFailure(
            ErrorCode.INTERNAL,
            f"agent {agent.name!r} did not acknowledge {kind} within {ACK_TIMEOUT_S:g} s; it "
            f"may be stuck (see its stderr.log in {agent.run.path})",
        ) from None
    seq = ack.ref if isinstance(ack.ref, int) else 0
    return ControlReply(
        name=agent.name,
        seq=seq,
        ack=ack.status,
        state=agent.state,
        reason=ack.reason if isinstance(ack.reason, str) else UNSET,
        event=ack,
    )


def _worktree_fields(worktree: dict[str, Any] | None) -> dict[str, Any]:
    """The status fields of an agent's worktree (none without one)."""
    if not worktree:
        return {}
    fields = {key: worktree.get(key) for key in ("path", "branch", "base")}
    return {
        "worktree": fields["path"] if isinstance(fields["path"], str) else UNSET,
        "branch": fields["branch"] if isinstance(fields["branch"], str) else UNSET,
        "base": fields["base"] if isinstance(fields["base"], str) else UNSET,
    }
