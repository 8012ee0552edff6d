"""A run on another host, driven from here: :func:`spawn_remote` and :class:`RemoteRunHandle`.

Theory of operation: the child runs under its host's daemon, which supervises it (ready,
acks, deadline, cancel grace: the one supervision core) and forwards its control, event
and inbox lines into JetStream (:mod:`tether.daemon.hosts`). Here we

- send controls through the host's verbs over NATS (``agent.steer`` and friends answer
  with the control's ``seq`` once the child has acknowledged it);
- tail the run's control and event channels and mirror them with the same
  :class:`~tether.runtime.mirror.RunMirror` a local parent uses. The two channels are
  separate streams, so an ack is held until its control has been read;
- tail its inbox channel; and build the :class:`~tether.runtime.outcome.RunResult` from the
  verdict as a local parent does (a text the child had to cut comes from the host's
  ``agent.status``).

The handle has :class:`~tether.runtime.parent.RunHandle`'s methods (``steer``,
``follow_up``, ``finalize``, ``close``, ``cancel``, ``updates``, ``events``, ``wait``,
``aclose``, ``state``, ``done``); what needs the local process (``pid``, ``kill``) is
``kill`` through the host (``agent.rm --force``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tether import jsondepth
from tether.daemon.client import DaemonCallError
from tether.daemon.hosts import control_channel, events_channel, inbox_channel
from tether.daemon.remote import call_host, connect
from tether.errors import ControlRefused, RunEnded
from tether.runtime.mirror import ChannelError, RunMirror
from tether.runtime.outcome import RunResult, Timeouts
from tether.runtime.supervise import RunWatch
from tether.runtime.updates import InboxItem, RunEvent, Update
from tether.transports.channel import Entry
from tether.wire import AnyEvent, ControlAck
from tether.wire.session import ControlKind, State

if TYPE_CHECKING:
    from nats.aio.client import Client

    from tether.transports.jetstream import JetStreamChannel

__all__ = ["RemoteRunHandle", "spawn_remote"]

MAX_HELD_EVENTS = 4096  # events held behind an ack whose control line is unread


async def spawn_remote(
    task: str,
    *,
    host: str,
    nats_url: str | None = None,
    name: str | None = None,
    agent: str | None = None,
    agent_args: list[str] | None = None,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
    argv: list[str] | None = None,
    cwd: str | None = None,
    deadline_s: float | None = None,
    env: dict[str, str] | None = None,
    connect_options: dict[str, Any] | None = None,
) -> RemoteRunHandle:
    """Start ``task`` on ``host``'s daemon and return a handle to drive it from here.

    ``nats_url`` defaults to ``$TETHER_NATS_URL``; ``cwd`` and ``script`` are paths on
    that host. Raises :class:`~tether.daemon.client.DaemonCallError` with the host's code
    when it refuses, :class:`~tether.daemon.client.DaemonUnavailable` when it is away.
    """
    from tether.transports.jetstream import connect_options as options_from_env
    from tether.transports.jetstream import open_jetstream

    url = nats_url or os.environ.get("TETHER_NATS_URL")
    if not url:
        raise ValueError("spawn_remote needs nats_url or $TETHER_NATS_URL")
    options = connect_options if connect_options is not None else options_from_env(env=os.environ)
    client = await connect(url, options)
    params: dict[str, Any] = {"name": name or f"r-{os.urandom(4).hex()}", "task": task}
    extra = {
        "agent": agent,
        "agent_args": agent_args,
        "provider": provider,
        "model": model,
        "script": script,
        "argv": argv,
        "cwd": cwd,
        "deadline_s": deadline_s,
        "env": env,
    }
    params.update({key: value for key, value in extra.items() if value is not None})
    try:
        spawned = await call_host(client, host, "agent.spawn", params)
        channel = await open_jetstream(url, connect_options=options)
    except BaseException:
        await client.close()
        raise
    handle = RemoteRunHandle(client, channel, host, spawned["name"], spawned["run_id"])
    handle.start()
    return handle


class RemoteRunHandle:
    """See the module docstring. Make one with :func:`spawn_remote`."""

    def __init__(
        self, client: Client, channel: JetStreamChannel, host: str, name: str, run_id: str
    ) -> None:
        self.client = client
        self.channel = channel
        self.host = host
        self.name = name
        self.run_id = run_id
        self.mirror = RunMirror(run_id)
        self._created = time.time()
        self._acks: dict[int, ControlAck] = {}
        self._ack_waiters: dict[int, asyncio.Future[ControlAck]] = {}
        self._held: deque[tuple[AnyEvent, bytes]] = deque()
        self._finishing = False
        self._controls_seen = 0
        self._updates: asyncio.Queue[Update | None] = asyncio.Queue()
        self._result: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task[Any]] = []
        self._notes: list[str] = []

    def start(self) -> None:
        for coroutine in (self._follow_controls(), self._follow_events(), self._follow_inbox()):
            self._tasks.append(asyncio.ensure_future(coroutine))

    # -- state --------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self.mirror.state

    @property
    def done(self) -> bool:
        return self._result.done()

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    # -- controls -----------------------------------------------------------------------

    async def steer(self, text: str) -> ControlAck:
        return await self._control("agent.steer", {"text": text})

    async def follow_up(self, text: str) -> ControlAck:
        return await self._control("agent.follow_up", {"text": text})

    async def finalize(self, note: str | None = None) -> ControlAck:
        return await self._control("agent.finalize", {} if note is None else {"note": note})

    async def close(self) -> ControlAck:
        return await self._control("agent.stop", {"mode": "close", "timeout_s": 0.1})

    async def cancel(self) -> ControlAck | None:
        if self.done:
            return None
        try:
            return await self._control("agent.cancel", {})
        except (ControlRefused, RunEnded):
            return None

    async def send(self, kind: ControlKind | str, **fields: Any) -> ControlAck:
        verbs = {
            ControlKind.STEER: "agent.steer",
            ControlKind.FOLLOW_UP: "agent.follow_up",
            ControlKind.FINALIZE: "agent.finalize",
            ControlKind.CANCEL: "agent.cancel",
        }
        kind = ControlKind(kind)
        if kind is ControlKind.CLOSE:
            return await self.close()
        if kind not in verbs:
            raise ControlRefused(f"{kind} is sent by the host's daemon, not from here")
        return await self._control(verbs[kind], fields)

    def kill(self, reason: str = "killed by the user") -> None:
        """End the run through its host now (``agent.rm`` with force)."""
        self._notes.append(reason)
        task = asyncio.ensure_future(
            call_host(self.client, self.host, "agent.rm", {"name": self.name, "force": True})
        )
        self._tasks.append(task)

    async def _control(self, verb: str, fields: dict[str, Any]) -> ControlAck:
        if self.done:
            raise RunEnded(f"run {self.run_id} has ended")
        try:
            answer = await call_host(self.client, self.host, verb, {"name": self.name, **fields})
        except DaemonCallError as error:
            raise ControlRefused(f"{self.host}/{self.name}: {error}") from None
        return await self.wait_ack(int(answer["seq"]))

    async def wait_ack(self, seq: int) -> ControlAck:
        """The ack for control ``seq`` as read from the run's event channel."""
        if seq in self._acks:
            return self._acks[seq]
        if self.done:
            raise RunEnded(f"run {self.run_id} ended before control seq {seq} was acknowledged")
        waiter = self._ack_waiters.get(seq)
        if waiter is None:
            waiter = self._ack_waiters[seq] = asyncio.get_running_loop().create_future()
        return await asyncio.shield(waiter)

    # -- reading ------------------------------------------------------------------------

    async def _follow_controls(self) -> None:
        async for item in self.channel.tail(control_channel(self.host, self.run_id)):
            if isinstance(item, Entry):
                self.mirror.expect(item.data)
                self._controls_seen = max(self._controls_seen, self.mirror.sender.seq)
                await self._release_held()

    async def _follow_events(self) -> None:
        async for item in self.channel.tail(events_channel(self.host, self.run_id)):
            if not isinstance(item, Entry):
                continue
            event, error = self._decode(item.data)
            if error is not None:
                self._put(error)
            if event is not None:
                self._hold(event, item.data)
                await self._release_held()
            if self.done:
                return

    def _decode(self, line: bytes) -> tuple[AnyEvent | None, ChannelError | None]:
        from tether.wire import Rejection, decode_event

        message = decode_event(line)
        if isinstance(message, Rejection):
            reason = f"invalid event line ({message.code}): {message.reason}"
            return None, ChannelError(reason, fatal=False, run=self.run_id)
        return message, None

    def _ahead(self, ack: ControlAck) -> bool:
        """An ack whose control line has not been read yet (the channels race)."""
        return isinstance(ack.ref, int) and ack.ref > self._controls_seen

    def _hold(self, event: AnyEvent, raw: bytes) -> None:
        if len(self._held) >= MAX_HELD_EVENTS:
            self._put(ChannelError("acks arrive for controls never seen", run=self.run_id))
            return
        self._held.append((event, raw))

    async def _release_held(self) -> None:
        """Apply the held events in order, up to the first ack whose control is unread:
        everything after such an ack waits with it, so updates keep the child's order."""
        while self._held:
            event, raw = self._held[0]
            if isinstance(event, ControlAck) and self._ahead(event):
                return
            self._held.popleft()
            self._apply(event, raw)
            if self.mirror.finished and not self._finishing:
                self._finishing = True
                await self._finish()

    def _apply(self, event: AnyEvent, raw: bytes) -> None:
        problem = self.mirror.apply(event)
        if problem is not None:
            self._put(ChannelError(problem, run=self.run_id))
        self._put(RunEvent(self.run_id, event, raw, self.mirror.state))
        if isinstance(event, ControlAck) and isinstance(event.ref, int):
            self._acks[event.ref] = event
            waiter = self._ack_waiters.pop(event.ref, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event)

    async def _follow_inbox(self) -> None:
        async for item in self.channel.tail(inbox_channel(self.host, self.run_id)):
            if not isinstance(item, Entry):
                continue
            with contextlib.suppress(ValueError):
                message = jsondepth.decode_any(item.data)
                if isinstance(message, dict):
                    self._put(InboxItem(self.run_id, message))

    def _put(self, update: Update) -> None:
        self._updates.put_nowait(update)

    async def updates(self) -> AsyncIterator[Update]:
        """Events, inbox messages and channel errors in order; ends when the run ends."""
        while (item := await self._updates.get()) is not None:
            yield item

    async def events(self) -> AsyncIterator[AnyEvent]:
        async for item in self.updates():
            if isinstance(item, RunEvent):
                yield item.event

    # -- the end ------------------------------------------------------------------------

    async def _finish(self) -> None:
        verdict = RunWatch(self.mirror, Timeouts(), now=time.monotonic()).verdict()
        result = verdict.result
        elapsed = max(0.0, time.time() - self._created)
        if result is None:
            outcome = RunResult(verdict.status, error=verdict.error, run_id=self.run_id)
        else:
            cut = result.final_text if isinstance(result.final_text, str) else ""
            text, truncated = await self._full_text(cut, result.final_text_path)
            outcome = RunResult(
                verdict.status,
                final_text=text,
                stop_reason=result.stop_reason,
                usage=result.usage if isinstance(result.usage, dict) else None,
                truncated=truncated,
                error=verdict.error,
                run_id=self.run_id,
                elapsed_s=elapsed,
            )
        for seq, waiter in self._ack_waiters.items():
            if not waiter.done():
                waiter.set_exception(RunEnded(f"run ended before seq {seq} was acknowledged"))
        self._updates.put_nowait(None)
        if not self._result.done():
            self._result.set_result(outcome)

    async def _full_text(self, text: str, path: object) -> tuple[str, bool]:
        if not isinstance(path, str):
            return text, False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the host reads the file when the run ends
            try:
                status = await call_host(
                    self.client, self.host, "agent.status", {"name": self.name}
                )
            except DaemonCallError as error:  # e.g. a text over NATS's max_payload
                self._notes.append(f"the full text could not be fetched: {error}")
                break
            full = status.get("final_text") if isinstance(status, dict) else None
            if isinstance(full, str):
                return full, False
            await asyncio.sleep(0.1)
        self._notes.append("the host did not give the full text; this is the child's cut")
        return text, True

    async def wait(self) -> RunResult:
        return await asyncio.shield(self._result)

    async def aclose(self) -> RunResult:
        if not self.done:
            await self.cancel()
        result = await self.wait()
        await self.release()
        return result

    async def release(self) -> None:
        """Stop following and close the connections (the run itself goes on if alive)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.channel.aclose()
        with contextlib.suppress(Exception):
            await self.client.close()

    async def __aenter__(self) -> RemoteRunHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
