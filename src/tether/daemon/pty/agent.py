"""PTY agents: any interactive program on a pseudo-terminal, held by a holder process.

Theory of operation. ``agent.spawn {name, pty: true, argv, cols?, rows?, cwd?, env?}``
makes a run directory, inserts the agent's registry row (its ``pty`` column records the
holder's pid, start time, socket and the terminal size) and starts
:mod:`tether.daemon.pty.holder` in a session of its own. The holder prints the program's
pid; the daemon then connects to the holder's private socket and keeps a copy of the
output ring, fed by the holder's output frames, for the viewers that
:mod:`tether.daemon.pty.drive` attaches.

A daemon that stops (or is killed) leaves holder and program running. A restarted daemon
finds the row live and the holder's pid alive with the same start time
(:func:`~tether.procs.process_matches`) and re-attaches: the holder's hello
says the size, its ring frame restores the screen. A row whose holder is gone ends with
what ``pty-exit.json`` says (the holder writes it when the program ends) or ``failed``.

States: ``starting`` until the holder is connected, ``running`` while the program runs,
then ``done`` (exit 0), ``failed`` (another exit or a signal) or ``cancelled`` (ended by
``agent.stop``/``rm --force``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from msgspec import UNSET

from tether import procs
from tether.daemon.fleet.fno_shapes import reference_base, wire_status
from tether.daemon.fleet.registry import AgentNotFound, AgentRecord, AgentRegistry
from tether.daemon.fleet.replies import AgentStatus, PtyInfo, StopReply
from tether.daemon.pty.frames import (
    EXIT_NAME,
    MAX_HOLDER_FRAME,
    SOCKET_NAME,
    ExitInfo,
    Hello,
    HolderFrame,
    HolderRejection,
    Kind,
    OutputRing,
    Resize,
    Stop,
    decode_holder_frame,
    decode_json,
    encode,
)
from tether.daemon.pty.holder import read_exit_file
from tether.daemon.rpc.methods import invalid_status
from tether.daemon.rpc.protocol import FrameDecoder
from tether.procs import process_matches
from tether.runtime.parent.process import ChildProcess
from tether.runtime.parent.rundir import RunDir
from tether.wire.needdata import NEED_DATA

if TYPE_CHECKING:
    from tether.daemon.fleet.wire_agent import WireAgent

log = logging.getLogger("tether.daemon.pty")

HELLO_TIMEOUT_S: Final = 10.0
STOP_GRACE_S: Final = 2.0
RECONNECTS: Final = 3
MAX_LINK_BUFFER: Final = 4 * 1_048_576  # keystrokes queued for a holder that stopped reading
MAX_SOCKET_PATH: Final = 107
DEFAULT_TERM: Final = "xterm-256color"


class Viewer(Protocol):
    """Someone watching a PTY agent (a drive WebSocket)."""

    def send_output(self, data: bytes) -> None: ...

    def send_control(self, message: dict[str, Any]) -> None: ...

    def agent_ended(self, message: dict[str, Any]) -> None: ...


class _HolderLink(asyncio.Protocol):
    """The daemon's end of one connection to a holder."""

    def __init__(self, agent: PtyAgent) -> None:
        self.agent = agent
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(MAX_HOLDER_FRAME)
        self.hello: asyncio.Future[Hello] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while (body := self._decoder.next_frame()) is not NEED_DATA:
            frame = decode_holder_frame(body) if isinstance(body, bytes) else HolderRejection("bad")
            if isinstance(frame, HolderRejection):
                log.warning("agent %s: bad frame from the holder: %s", self.agent.name, frame)
                self.close()
                return
            self.agent._on_frame(self, frame)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.hello.done():
            self.hello.set_exception(ConnectionError("the holder closed the connection"))
            self.hello.exception()
        self.agent._link_lost(self)

    def write(self, data: bytes) -> bool:
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if transport.get_write_buffer_size() > MAX_LINK_BUFFER:
            return False
        transport.write(data)
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class PtyAgent:
    """One PTY agent of this daemon; see the module docstring."""

    kind = "pty"

    def __init__(
        self, registry: Callable[[], AgentRegistry], record: AgentRecord, popen: Any = None
    ) -> None:
        self.registry = registry  # the daemon's one registry
        self.record = record
        self.name = record.name
        self.run = RunDir(Path(record.run_dir).name, Path(record.run_dir))
        info = record.pty or {}
        self.cols: int = int(info.get("cols", 80))
        self.rows: int = int(info.get("rows", 24))
        self.holder_pid: int | None = info.get("holder_pid")
        self.pid = record.pid
        self.ring = OutputRing()
        self.viewers: set[Viewer] = set()
        self.state = record.state
        self.adopted = False
        self.error: str | None = record.detail
        self.exit_code: int | None = record.exit_code
        self.ended_at: float | None = None
        self._popen = popen
        self._reaper: asyncio.Task[None] | None = None
        self._link: _HolderLink | None = None
        self._stopping = False
        self._detached = False
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- public -----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def ended(self) -> bool:
        return self._ended.done()

    @property
    def attached(self) -> bool:
        return bool(self.viewers)

    async def wait_ended(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._ended), timeout)
        return self.ended

    def mark_ended(self) -> None:
        """A row that ended before this daemon started: history only."""
        self.ended_at = self.record.updated_at
        if not self._ended.done():
            self._ended.set_result(None)

    async def connect(self) -> None:
        """Connect to the holder and wait for its hello; raises ``ConnectionError``."""
        loop = asyncio.get_running_loop()
        path, fd = _socket_address(self.run.path / SOCKET_NAME)
        try:
            _, link = await loop.create_unix_connection(lambda: _HolderLink(self), path)
        except OSError as exc:
            raise ConnectionError(f"cannot reach the holder: {exc}") from None
        finally:
            if fd is not None:
                os.close(fd)
        self._link = link
        hello = await asyncio.wait_for(asyncio.shield(link.hello), HELLO_TIMEOUT_S)
        self.pid, self.cols, self.rows = hello.pid, hello.cols, hello.rows

    def add_viewer(self, viewer: Viewer) -> bytes:
        """Register ``viewer``; returns the ring's content (what it must show first)."""
        if not self.ended:
            self.viewers.add(viewer)
        return self.ring.content()

    def remove_viewer(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)

    def write_input(self, data: bytes) -> bool:
        """Send keystrokes to the program, in order; False when no holder is connected."""
        link = self._link
        return link is not None and not self.ended and link.write(encode(Kind.INPUT, data))

    def resize(self, cols: int, rows: int) -> None:
        if self.ended or (cols, rows) == (self.cols, self.rows):
            return
        self.cols, self.rows = cols, rows
        if self._link is not None:
            self._link.write(encode(Kind.RESIZE, Resize(cols=cols, rows=rows)))
        self._save(pty=self._pty_info())
        for viewer in list(self.viewers):
            viewer.send_control({"type": "resize", "cols": cols, "rows": rows})

    async def hang_up(self, timeout: float = STOP_GRACE_S + 3.0) -> bool:  # noqa: ASYNC109
        """Hang up the program (SIGHUP, then SIGKILL after a grace) and wait for the end."""
        if self.ended:
            return True
        self._stopping = True
        grace = min(STOP_GRACE_S, max(0.0, timeout - 1.0))
        if self._link is None or not self._link.write(encode(Kind.STOP, Stop(grace_s=grace))):
            await self._kill()
        if not await self.wait_ended(timeout):
            await self._kill()
        return self.ended

    async def detach(self) -> None:
        """Daemon shutdown: let go of the holder; holder and program keep running."""
        self._detached = True
        if self._link is not None:
            self._link.close()
        for viewer in list(self.viewers):
            viewer.agent_ended({"type": "detached", "reason": "the daemon is shutting down"})
        self.viewers.clear()

    def status(self) -> AgentStatus:
        record = self.record
        wire = wire_status(self.state)
        ended = self.ended
        info = PtyInfo(
            cols=self.cols,
            rows=self.rows,
            attached=self.attached,
            viewers=len(self.viewers),
            holder_pid=self.holder_pid,
            output_bytes=len(self.ring) + self.ring.dropped,
        )
        return AgentStatus(
            name=self.name,
            kind=self.kind,
            state=self.state,
            pid=self.pid,
            run_id=self.run_id,
            run_dir=record.run_dir,
            created_at=record.created_at,
            started_at=record.started_at,
            channel_id=record.channel_id,
            adopted=self.adopted,
            status=wire,
            live_status=wire,
            **reference_base(record, self.run_id),
            argv=record.argv,
            attached=self.attached,
            pty=info,
            ended_at=self.ended_at if ended else UNSET,
            exit_code=self.exit_code if ended else UNSET,
            error=self.error if ended else UNSET,
        )

    async def stop(self, mode: str, timeout_s: float, note: str | None) -> StopReply:
        """A program on a terminal has no turns: every mode hangs it up."""
        if self.ended:
            return StopReply(name=self.name, already_exited=True, state=self.state)
        ended = await self.hang_up(max(1.0, timeout_s))
        return StopReply(
            name=self.name, mode=mode, seq=0, ack="accepted", state=self.state, ended=ended
        )

    def wire(self) -> WireAgent:
        raise invalid_status(
            f"agent {self.name!r} is a PTY agent: type into it through agent.drive "
            f"('tether agent attach {self.name}')"
        )

    # -- from the holder ----------------------------------------------------------------

    def _on_frame(self, link: _HolderLink, frame: HolderFrame) -> None:
        if frame.kind is Kind.OUTPUT:
            self.ring.append(frame.payload)
            for viewer in list(self.viewers):
                viewer.send_output(frame.payload)
        elif frame.kind is Kind.RING:
            self.ring.replace(frame.payload)
        elif frame.kind is Kind.HELLO:
            hello = decode_json(frame)
            if isinstance(hello, Hello) and not link.hello.done():
                link.hello.set_result(hello)
        elif frame.kind is Kind.EXIT:
            info = decode_json(frame)
            self._end_with(info if isinstance(info, ExitInfo) else None)

    def _link_lost(self, link: _HolderLink) -> None:
        if link is not self._link:
            return
        self._link = None
        if self.ended or self._detached:
            return
        asyncio.get_running_loop().create_task(self._after_link_lost())

    async def _after_link_lost(self) -> None:
        for attempt in range(RECONNECTS):
            if self.ended or not self._holder_alive():
                break
            await asyncio.sleep(0.05 * (attempt + 1))
            with contextlib.suppress(ConnectionError, TimeoutError):
                await self.connect()
                return
        if self.ended:
            return
        if self._holder_alive() or self._program_alive():  # end it rather than lose it
            await self._kill()
        self._end_with(read_exit_file(self.run.path / EXIT_NAME), holder_gone=True)

    def _holder_alive(self) -> bool:
        if self._popen is not None and self._popen.poll() is not None:
            return False
        info = self.record.pty or {}
        return process_matches(self.holder_pid, info.get("holder_start_time"))

    def _program_alive(self) -> bool:
        return process_matches(self.pid, self.record.pid_start_time)

    async def _kill(self) -> None:
        for pid in (self.pid, self.holder_pid):
            if pid is not None:
                await procs.terminate_group(pid, 0.5)
        if self._popen is not None:
            self._popen.poll()

    # -- ending ---------------------------------------------------------------------------

    def _end_with(self, info: ExitInfo | None, *, holder_gone: bool = False) -> None:
        if self.ended:
            return
        if self._stopping:
            self.state, self.error = "cancelled", "stopped"
        elif info is not None:
            self.state, self.error = info.status, None if info.code == 0 else info.describe()
        else:
            self.state = "failed"
            self.error = f"the PTY holder (pid {self.holder_pid}) is gone"
        if info is not None:
            self.exit_code = info.code if info.signal is None else -info.signal
        elif holder_gone and self.error is None:
            self.error = "the PTY holder ended"
        self.ended_at = time.time()
        self._reap_holder()
        self._save(state=self.state, exit_code=self.exit_code, detail=self.error)
        self._ended.set_result(None)
        message = {"type": "exit", "state": self.state, "exit_code": self.exit_code}
        for viewer in list(self.viewers):
            viewer.agent_ended(message)
        self.viewers.clear()
        if self._link is not None:
            self._link.close()

    def _reap_holder(self) -> None:
        """Reap our holder once it has exited (it writes its exit frame first, so it is
        usually still running here): a stopped agent left it a zombie of the daemon until
        ``agent rm``. Woken by its exit (a pidfd), never polled."""
        popen = self._popen
        if popen is None or popen.poll() is not None or self._reaper is not None:
            return

        async def reap() -> None:
            await ChildProcess(popen).wait()
            popen.poll()

        self._reaper = asyncio.get_running_loop().create_task(reap())

    def _save(self, **fields: Any) -> None:
        with contextlib.suppress(AgentNotFound):
            self.record = self.registry().update(self.name, **fields)

    def _pty_info(self) -> dict[str, Any]:
        return {**(self.record.pty or {}), "cols": self.cols, "rows": self.rows}


def _socket_address(path: Path) -> tuple[str, int | None]:
    """A connectable address for ``path``: itself, or through an ``O_PATH`` descriptor of
    its directory when the whole path is longer than ``sun_path`` allows."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return str(path), None
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{path.name}", fd


__all__ = ["PtyAgent", "Viewer"]
