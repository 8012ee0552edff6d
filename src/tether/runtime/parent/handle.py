"""What every live run offers, wherever it runs: :class:`RunHandle`.

Theory of operation: a run is driven by one of two drivers. :class:`~tether.runtime.parent.
driver.LocalRunHandle` supervises a child on this machine (made by :func:`tether.spawn`, and
by the daemon for each of its wire agents); :class:`~tether.daemon.hosts.remote_run.
RemoteRunHandle` (from :func:`tether.spawn_remote`) drives a child that another host's
daemon supervises. User code is typed with :class:`RunHandle`, the one type both are, and
this class holds everything that does not depend on where the child is, once:

- the controls (``steer``, ``follow_up``, ``finalize``, ``close``, ``cancel``) are
  :meth:`send`, which holds the one pre-check (a run that has ended raises
  :class:`~tether.errors.RunEnded`) and returns the child's own ack: a control the
  run's state refuses comes back as a ``rejected`` ack with the table's reason, never as
  an exception, locally, through the daemon (``agent.steer`` answers that ack) and across
  hosts alike. A driver implements :meth:`_deliver` (append to the control file and wait
  for the ack, or call the host's verb) and :meth:`kill`;
- acks: a driver hands each validated event to :meth:`_event`, which queues it for
  :meth:`updates` and resolves the ack a caller waits for;
- the end: a driver calls :meth:`_fail_waiters` and then :meth:`_settle` with the
  :class:`~tether.runtime.parent.outcome.RunResult` (built by :func:`result_of`), after
  which :meth:`wait` returns it and :meth:`updates` ends.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tether.errors import RunEnded
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import RunResult
from tether.runtime.parent.supervise import Verdict
from tether.runtime.parent.updates import LogSource, RunEvent, Update, UpdateQueue
from tether.wire import AnyEvent, ControlAck
from tether.wire.session import ControlKind, State

__all__ = ["RunHandle", "result_of"]


class RunHandle(abc.ABC):
    """A live run: send controls, read its updates, wait for its :class:`RunResult`.

    Every control method returns the ``control-ack`` the child sent for it; :meth:`wait`
    never hangs. Made by :func:`tether.spawn` (a local child) or
    :func:`tether.spawn_remote` (a child on another host).
    """

    def __init__(
        self,
        run_id: str,
        mirror: RunMirror,
        *,
        keep_updates: bool = True,
        source: LogSource | None = None,
    ) -> None:
        self.run_id = run_id
        self.mirror = mirror
        # None: nobody reads this run's updates (a daemon's agent: its followers read the log)
        self._updates = UpdateQueue(run_id, source=source) if keep_updates else None
        self._acks: dict[int, ControlAck] = {}
        self._ack_waiters: dict[int, asyncio.Future[ControlAck]] = {}
        self._notes: list[str] = []
        self._ended = False  # set by the driver when the run starts ending
        self._result: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()

    # -- what a driver provides -----------------------------------------------------

    @abc.abstractmethod
    async def _deliver(self, kind: ControlKind, fields: dict[str, Any]) -> ControlAck:
        """Send the control and return the child's ack for it."""

    @abc.abstractmethod
    def kill(self, reason: str = "killed by the user") -> None:
        """End the run now; it fails with ``reason``."""

    @abc.abstractmethod
    async def _release(self) -> None:
        """What :meth:`aclose` frees once the run has ended (a driver's connections)."""

    # -- state ----------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The run state mirrored from the child's events."""
        return self.mirror.state

    @property
    def done(self) -> bool:
        """True once the run has ended and :meth:`wait` returns at once."""
        return self._result.done()

    @property
    def notes(self) -> list[str]:
        """Problems noticed on the way (channel errors, index trouble), oldest first."""
        return list(self._notes)

    # -- controls -------------------------------------------------------------------

    async def send(self, kind: ControlKind | str, **fields: Any) -> ControlAck:
        """Send any control and return the child's ack (``rejected`` with its reason when
        the run's state refuses it). Raises :class:`RunEnded` when the run has ended
        (or ends before the ack), ``ValueError`` for a control that cannot be encoded."""
        kind = ControlKind(kind)
        if self._ended:
            raise RunEnded(f"run {self.run_id} has ended; cannot send {kind}")
        return await self._deliver(kind, fields)

    async def steer(self, text: str) -> ControlAck:
        """Inject ``text`` at the next turn boundary (starts a turn when ready)."""
        return await self.send(ControlKind.STEER, text=text)

    async def follow_up(self, text: str) -> ControlAck:
        """Queue ``text`` for after the current turn (starts a turn when ready)."""
        return await self.send(ControlKind.FOLLOW_UP, text=text)

    async def finalize(self, note: str | None = None) -> ControlAck:
        """Ask for one last tool-free turn and the result."""
        fields = {} if note is None else {"note": note}
        return await self.send(ControlKind.FINALIZE, **fields)

    async def close(self) -> ControlAck:
        """Finish cleanly after the current turn."""
        return await self.send(ControlKind.CLOSE)

    async def cancel(self) -> ControlAck | None:
        """Abort the run. Returns the ack, or None when the child never acknowledged it.

        A local child that does not exit within ``cancel_grace_s`` has its process group
        ended (SIGTERM, then SIGKILL) and the run fails; a remote one, by its host.
        """
        if self._ended:
            return None
        try:
            return await self.send(ControlKind.CANCEL)
        except RunEnded:
            return None

    async def wait_ack(self, seq: int) -> ControlAck:
        """The ack for control ``seq``; raises :class:`RunEnded` if the run ends first."""
        if seq in self._acks:
            return self._acks[seq]
        if self._ended:
            raise RunEnded(f"run {self.run_id} ended before control seq {seq} was acknowledged")
        waiter = self._ack_waiters.get(seq)
        if waiter is None:
            waiter = self._ack_waiters[seq] = asyncio.get_running_loop().create_future()
        return await asyncio.shield(waiter)

    # -- reading --------------------------------------------------------------------

    async def updates(self) -> AsyncIterator[Update]:
        """Everything that happens, in order: events, inbox messages, channel errors.

        One consumer at a time; from the start of the run, in order. Memory is bounded
        and nothing is lost: a reader that falls far behind is served from the run's logs
        until it has caught up (a run on another host: told how many were dropped). Ends
        when the run has ended and everything was read.
        """
        if self._updates is None:
            raise TypeError(f"run {self.run_id} keeps no updates (read its event log instead)")
        while (item := await self._updates.get()) is not None:
            yield item

    async def events(self) -> AsyncIterator[AnyEvent]:
        """The validated wire events only (see :meth:`updates`)."""
        async for item in self.updates():
            if isinstance(item, RunEvent):
                yield item.event

    # -- the end --------------------------------------------------------------------

    async def wait(self) -> RunResult:
        """Wait for the run to end and return its result. Never hangs."""
        return await asyncio.shield(self._result)

    async def aclose(self) -> RunResult:
        """Cancel the run if it is still going, wait for its result, free the driver."""
        if not self._result.done():
            await self.cancel()
        result = await self.wait()
        await self._release()
        return result

    async def __aenter__(self) -> RunHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- for the drivers ------------------------------------------------------------

    def _put(self, update: Update) -> None:
        if self._updates is not None:
            self._updates.put(update)

    def _event(self, event: AnyEvent, raw: bytes) -> None:
        """A validated (and mirrored) event: queue it, resolve the ack it may be."""
        if self._updates is not None:
            self._updates.put(RunEvent(self.run_id, event, raw, self.mirror.state))
        if isinstance(event, ControlAck) and isinstance(event.ref, int):
            self._acks[event.ref] = event
            waiter = self._ack_waiters.pop(event.ref, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event)

    def _fail_waiters(self, status: str) -> None:
        """The run has ended: every control still waiting for its ack gets RunEnded."""
        self._ended = True
        for seq, waiter in list(self._ack_waiters.items()):
            if not waiter.done():
                waiter.set_exception(
                    RunEnded(
                        f"run {self.run_id} ended ({status}) before control "
                        f"seq {seq} was acknowledged"
                    )
                )
                waiter.exception()  # mark retrieved: nobody may be waiting any more
        self._ack_waiters.clear()

    def _settle(self, result: RunResult) -> None:
        """End :meth:`updates` and hand out ``result``."""
        if self._updates is not None:
            self._updates.close()
        if not self._result.done():
            self._result.set_result(result)


def result_of(
    verdict: Verdict, run_id: str, elapsed_s: float, text: str = "", truncated: bool = False
) -> RunResult:
    """The :class:`RunResult` of a verdict; ``text`` is the full final text when it had
    one (a driver reads a text the child cut from where it is kept)."""
    result = verdict.result
    if result is None:
        return RunResult(verdict.status, error=verdict.error, run_id=run_id, elapsed_s=elapsed_s)
    return RunResult(
        verdict.status,
        final_text=text,
        stop_reason=result.stop_reason,
        usage=result.usage if isinstance(result.usage, dict) else None,
        truncated=truncated,
        error=verdict.error,
        run_id=run_id,
        elapsed_s=elapsed_s,
    )
