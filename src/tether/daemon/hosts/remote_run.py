"""A run on another host, driven from here: :func:`spawn_remote` and :class:`RemoteRunHandle`.

Theory of operation: the child runs under its host's daemon, which supervises it (ready,
acks, deadline, cancel grace: the one supervision core) and forwards its control, event
and inbox lines into JetStream (:mod:`tether.daemon.hosts.link`). Here we

- send controls through the host's verbs over NATS (``agent.steer`` and friends answer
  with the control's ``seq`` once the child has acknowledged it);
- follow the run's control, event and inbox channels through one consumer
  (``h.<host>.run.<id>.*``, :meth:`~tether.transports.cluster.ClusterChannel.tail_matching`)
  and mirror them with the same :class:`~tether.runtime.parent.mirror.RunMirror` a local parent
  uses. The host forwards each file on its own, so an ack can be stored before its
  control line: it is held until its control has been read;
- hand on its inbox lines; and build the :class:`~tether.runtime.parent.outcome.RunResult` from the
  verdict as a local parent does (a text the child had to cut comes from the host's
  ``agent.status``).

The handle is a :class:`~tether.runtime.parent.handle.RunHandle` (``tether.RunHandle``, the type
a local run's handle is too): its controls, acks, updates and end are that class's; this
driver provides ``send`` (the host's verbs), ``kill`` (``agent.rm --force`` through the
host) and the reading above. What needs the local process (``pid``, the inbox database
behind ``answer``) is a local handle's only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import msgspec

from tether import jsondepth
from tether.daemon.hosts.names import control_channel, events_channel, inbox_channel, run_channels
from tether.daemon.hosts.remote import call_host, connect
from tether.daemon.rpc.client import DaemonCallError
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import ControlRefused, RunEnded
from tether.runtime.parent.handle import RunHandle, result_of
from tether.runtime.parent.mirror import ChannelError, RunMirror
from tether.runtime.parent.options import SpawnOptions
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.supervise import RunWatch
from tether.runtime.parent.updates import InboxItem
from tether.wire import AnyEvent, ControlAck
from tether.wire.session import ControlKind

if TYPE_CHECKING:
    from tether.transports.cluster import Cluster, ClusterSettings

__all__ = ["RemoteRunHandle", "spawn_remote"]

MAX_HELD_EVENTS = 4096  # events held behind an ack whose control line is unread
VERBS = {
    ControlKind.STEER: "agent.steer",
    ControlKind.FOLLOW_UP: "agent.follow_up",
    ControlKind.FINALIZE: "agent.finalize",
    ControlKind.CANCEL: "agent.cancel",
}
# The host's answers that mean the run is over (or gone) already: RunEnded, as locally.
ENDED = frozenset({ErrorCode.INVALID_STATUS, ErrorCode.AGENT_NOT_FOUND})
REFUSALS = frozenset(
    {ErrorCode.INVALID_PARAMS, ErrorCode.MALFORMED_FRAME, ErrorCode.UNKNOWN_METHOD}
)
"""The host's answers that refuse the control itself (:class:`ControlRefused`: it does not
encode). A control the run's state refuses is not an error: the host answers the child's
``rejected`` ack, returned as locally. Any other code (``shutting_down``: the host lost
with the control in flight, ``busy``, ``internal``) is raised as the host's
:class:`DaemonCallError`, code and all: the control may have landed."""


async def spawn_remote(
    task: str,
    options: SpawnOptions | None = None,
    /,
    *,
    host: str,
    nats_url: str | None = None,
    name: str | None = None,
    settings: ClusterSettings | None = None,
    **fields: Any,
) -> RemoteRunHandle:
    """Start ``task`` on ``host``'s daemon and return a handle to drive it from here.

    ``options`` and ``fields`` are :func:`tether.spawn`'s :class:`SpawnOptions` (sent to the
    host's ``agent.spawn``; ``cwd`` and ``script`` are paths on that host); what only a
    local parent decides (its index, timeouts, watcher) does not apply. ``nats_url``
    defaults to ``$TETHER_NATS_URL``, ``settings`` (credentials, CA) to
    ``$TETHER_NATS_CREDS`` and ``$TETHER_NATS_CA``. Raises
    :class:`~tether.daemon.rpc.client.DaemonCallError` with the host's code when it refuses,
    :class:`~tether.daemon.rpc.client.DaemonUnavailable` when it is away.
    """
    from tether.transports.cluster import ClusterSettings

    opts = options or SpawnOptions()
    if fields:
        opts = opts.replace(**fields)
    url = nats_url or os.environ.get("TETHER_NATS_URL")
    if not url:
        raise ValueError("spawn_remote needs nats_url or $TETHER_NATS_URL")
    cluster = await connect(url, settings or ClusterSettings.from_env(os.environ))
    params = {
        **msgspec.to_builtins(opts),
        "name": name or f"r-{os.urandom(4).hex()}",
        "task": task,
    }
    try:
        spawned = await call_host(cluster, host, "agent.spawn", params)
    except BaseException:
        await cluster.aclose()
        raise
    handle = RemoteRunHandle(cluster, host, spawned["name"], spawned["run_id"])
    handle.start()
    return handle


class RemoteRunHandle(RunHandle):
    """See the module docstring. Make one with :func:`spawn_remote`."""

    def __init__(self, cluster: Cluster, host: str, name: str, run_id: str) -> None:
        super().__init__(run_id, RunMirror(run_id))
        self.cluster = cluster
        self.channel = cluster.channel
        self.host = host
        self.name = name
        self._created = time.time()
        self._held: deque[tuple[AnyEvent, bytes]] = deque()
        self._finishing = False
        self._controls_seen = 0
        self._tasks: list[asyncio.Task[Any]] = []

    def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._follow()))

    # -- controls: the host's verbs -----------------------------------------------------

    async def _deliver(self, kind: ControlKind, fields: dict[str, Any]) -> ControlAck:
        if kind is ControlKind.CLOSE:
            return await self._control("agent.stop", {"mode": "close", "timeout_s": 0.1})
        verb = VERBS.get(kind)
        if verb is None:
            raise ControlRefused(f"{kind} is sent by the host's daemon, not from here")
        return await self._control(verb, fields)

    def kill(self, reason: str = "killed by the user") -> None:
        """End the run through its host now (``agent.rm`` with force)."""
        self._notes.append(reason)
        task = asyncio.ensure_future(
            call_host(self.cluster, self.host, "agent.rm", {"name": self.name, "force": True})
        )
        self._tasks.append(task)

    async def _control(self, verb: str, fields: dict[str, Any]) -> ControlAck:
        if self._ended:
            raise RunEnded(f"run {self.run_id} has ended")
        try:
            answer = await call_host(self.cluster, self.host, verb, {"name": self.name, **fields})
        except DaemonCallError as error:
            if error.code in ENDED:  # nothing left to send it to
                raise RunEnded(f"{self.host}/{self.name}: {error}") from None
            if error.code not in REFUSALS:  # the host lost, busy or failing: not this control
                raise DaemonCallError(
                    error.code, f"{self.host}/{self.name}: {error.message}"
                ) from None
            raise ControlRefused(f"{self.host}/{self.name}: {error}") from None
        seq = int(answer["seq"])
        ack = _ack_in(answer, self.run_id, seq)
        if ack is not None:  # the host's answer carries the child's ack: no wait for its line
            return self._acks.setdefault(seq, ack)
        return await self.wait_ack(seq)

    # -- reading ------------------------------------------------------------------------

    async def _follow(self) -> None:
        """The run's three channels through one consumer (``h.<host>.run.<id>.*``), each
        entry handed on by the channel it is in."""
        handlers = {
            control_channel(self.host, self.run_id): self._on_control,
            events_channel(self.host, self.run_id): self._on_event,
            inbox_channel(self.host, self.run_id): self._on_inbox,
        }
        pattern = run_channels(self.host, self.run_id)
        async for name, entry in self.channel.tail_matching(pattern):
            handler = handlers.get(name)
            if handler is not None:
                await handler(entry.data)

    async def _on_control(self, line: bytes) -> None:
        self.mirror.expect(line)
        self._controls_seen = max(self._controls_seen, self.mirror.sender.seq)
        await self._release_held()

    async def _on_event(self, line: bytes) -> None:
        if self.done:
            return
        event, error = self._decode(line)
        if error is not None:
            self._put(error)
        if event is not None:
            self._hold(event, line)
            await self._release_held()

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
        self._event(event, raw)

    async def _on_inbox(self, line: bytes) -> None:
        with contextlib.suppress(ValueError):
            message = jsondepth.decode_any(line)
            if isinstance(message, dict):
                self._put(InboxItem(self.run_id, message))

    # -- the end ------------------------------------------------------------------------

    async def _finish(self) -> None:
        verdict = RunWatch(self.mirror, Timeouts(), now=time.monotonic()).verdict()
        elapsed = max(0.0, time.time() - self._created)
        if verdict.result is None:
            outcome = result_of(verdict, self.run_id, elapsed)
        else:
            cut = verdict.result.final_text
            cut = cut if isinstance(cut, str) else ""
            text, truncated = await self._full_text(cut, verdict.result.final_text_path)
            outcome = result_of(verdict, self.run_id, elapsed, text, truncated)
        self._fail_waiters(outcome.status)
        self._settle(outcome)

    async def _full_text(self, text: str, path: object) -> tuple[str, bool]:
        if not isinstance(path, str):
            return text, False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the host reads the file when the run ends
            try:
                status = await call_host(
                    self.cluster, self.host, "agent.status", {"name": self.name}
                )
            except DaemonCallError as error:  # e.g. a text over the cluster's payload limit
                self._notes.append(f"the full text could not be fetched: {error}")
                break
            full = status.get("final_text") if isinstance(status, dict) else None
            if isinstance(full, str):
                return full, False
            await asyncio.sleep(0.1)
        self._notes.append("the host did not give the full text; this is the child's cut")
        return text, True

    async def _release(self) -> None:
        await self.release()

    async def release(self) -> None:
        """Stop following and close the connections (the run itself goes on if alive)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.cluster.aclose()


def _ack_in(answer: dict[str, Any], run_id: str, seq: int) -> ControlAck | None:
    """The child's control-ack for ``seq`` in a host's answer, validated as a wire event
    (None when the answer has none, e.g. ``agent.stop``, or it does not check out)."""
    import msgspec

    from tether.wire import Rejection, decode_event

    event = answer.get("event")
    if not isinstance(event, dict):
        return None
    decoded = decode_event(msgspec.json.encode(event))
    if isinstance(decoded, Rejection) or not isinstance(decoded, ControlAck):
        return None
    return decoded if decoded.ref == seq and decoded.run == run_id else None
