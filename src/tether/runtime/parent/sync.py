"""The blocking face of the parent: ``tether.run(task) -> RunResult`` and a context-manager handle.

:func:`run` is ``asyncio.run`` around :func:`~tether.runtime.parent.spawn.spawn` and
``wait``. :func:`open_run` gives a :class:`SyncRunHandle` whose methods block: it runs
one private event loop in a daemon thread for the handle's life and forwards each call
to it, so the asyncio parent does all the work (the same code, the same guarantees).
Leaving the ``with`` block cancels a run that is still going and waits for its result.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from tether.runtime.parent.approvals import Approval
from tether.runtime.parent.options import SpawnOptions, split_fields
from tether.runtime.parent.queue import Queued
from tether.runtime.parent.spawn import LocalRunHandle, RunResult, Update, spawn_run
from tether.wire import ControlAck
from tether.wire.session import State

T = TypeVar("T")

RUN_CANNOT_ASK = (
    "tether.run() cannot answer approvals; pass approve=[RULE], or use open_run() or "
    "spawn() and answer approvals()"
)


def run(task: str, options: SpawnOptions | None = None, /, **fields: Any) -> RunResult:
    """Start a child on ``task``, wait for it, return its :class:`RunResult` (blocking).

    Takes what :func:`tether.runtime.parent.spawn.spawn` takes (a :class:`SpawnOptions`
    and its fields by keyword). Must not be called from a running event loop (``await
    spawn(...)`` there instead). Nothing can answer an approval here: unless
    ``no_one_to_ask`` says otherwise, a call no rule decides is denied at once, saying so
    (answer them with :func:`open_run` and ``run.approvals()``).
    """
    opts, supervision = split_fields(options, fields)
    if opts.no_one_to_ask is None:  # nothing here can answer an approval: never wait for one
        opts = opts.replace(no_one_to_ask=RUN_CANNOT_ASK)

    async def go() -> RunResult:
        handle = await spawn_run(task, opts, supervision)
        try:
            return await handle.wait()
        finally:
            if not handle.done:
                await handle.aclose()

    return asyncio.run(go())


class _LoopThread:
    """An event loop running in a daemon thread; ``call`` runs a coroutine there and blocks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="tether-run", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()


class SyncApproval:
    """An :class:`~tether.runtime.parent.approvals.Approval` with blocking answers."""

    def __init__(self, loop: _LoopThread, approval: Approval) -> None:
        self._loop = loop
        self.approval = approval
        self.key, self.agent, self.tool = approval.key, approval.agent, approval.tool
        self.kind, self.summary, self.input = approval.kind, approval.summary, approval.input
        self.choices = approval.choices

    def __repr__(self) -> str:
        return repr(self.approval).replace("Approval(", "SyncApproval(", 1)

    def approve(self, text: str = "", *, always: bool = False) -> ControlAck:
        return self._loop.call(self.approval.approve(text, always=always))

    def deny(self, text: str = "") -> ControlAck:
        return self._loop.call(self.approval.deny(text))


class SyncRunHandle:
    """A live run with blocking methods; see :class:`~tether.runtime.parent.handle.RunHandle`."""

    def __init__(self, loop: _LoopThread, handle: LocalRunHandle) -> None:
        self._loop = loop
        self._handle = handle
        self._final: RunResult | None = None

    @property
    def run_id(self) -> str:
        return self._handle.run_id

    @property
    def state(self) -> State:
        return self._handle.state

    @property
    def handle(self) -> LocalRunHandle:
        """The asyncio handle (use it only on the handle's own loop)."""
        return self._handle

    def steer(self, text: str) -> ControlAck:
        return self._loop.call(self._handle.steer(text))

    def follow_up(self, text: str) -> ControlAck:
        return self._loop.call(self._handle.follow_up(text))

    def finalize(self, note: str | None = None) -> ControlAck:
        return self._loop.call(self._handle.finalize(note))

    def answer(
        self,
        message: str | Mapping[str, Any],
        text: str = "",
        *,
        decision: str | None = None,
        scope: str | None = None,
    ) -> ControlAck:
        """See :meth:`LocalRunHandle.answer`."""
        return self._loop.call(self._handle.answer(message, text, decision=decision, scope=scope))

    def queued(self) -> list[Queued]:
        """See :meth:`LocalRunHandle.queued`."""
        return self._handle.queued()

    def unqueue(self, ref: int) -> ControlAck:
        """See :meth:`LocalRunHandle.unqueue`."""
        return self._loop.call(self._handle.unqueue(ref))

    def approvals(self) -> Iterator[SyncApproval]:
        """The calls the agent waits on a person for, as they come, blocking between them;
        answer each with ``approval.approve()`` / ``deny(text)`` (see
        :meth:`LocalRunHandle.approvals`). Ends when the run has ended."""
        iterator = self._handle.approvals()

        async def next_item() -> Approval | None:
            try:
                return await anext(iterator)
            except StopAsyncIteration:
                return None

        while (item := self._loop.call(next_item())) is not None:
            yield SyncApproval(self._loop, item)

    def close(self) -> ControlAck:
        return self._loop.call(self._handle.close())

    def cancel(self) -> ControlAck | None:
        return self._loop.call(self._handle.cancel())

    def wait(self, timeout: float | None = None) -> RunResult:
        """The result; raises ``TimeoutError`` if ``timeout`` passes first (the run goes on)."""
        if self._final is None:
            self._final = self._loop.call(self._handle.wait(), timeout)
        return self._final

    def updates(self) -> Iterator[Update]:
        """Every update of the run in order, blocking between them (see ``RunHandle``)."""
        iterator = self._handle.updates()

        async def next_item() -> Update | None:
            try:
                return await anext(iterator)
            except StopAsyncIteration:
                return None

        while (item := self._loop.call(next_item())) is not None:
            yield item

    def __enter__(self) -> SyncRunHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._final is None:
                self._final = self._loop.call(self._handle.aclose())
        finally:
            self._loop.close()


def open_run(task: str, options: SpawnOptions | None = None, /, **fields: Any) -> SyncRunHandle:
    """Start a child and return a blocking handle; use it as a context manager.

    Takes what :func:`tether.runtime.parent.spawn.spawn` takes (see :func:`run`).
    """
    opts, supervision = split_fields(options, fields)
    loop = _LoopThread()
    try:
        handle = loop.call(spawn_run(task, opts, supervision))
    except BaseException:
        loop.close()
        raise
    return SyncRunHandle(loop, handle)
