"""Tools the agent can call, and the registry that offers them to the model.

A tool is a name, a description, a JSON Schema for its arguments object, and
``async run(arguments, context) -> (content, is_error)``. Tools run in the child's
working directory (``context.cwd``). Cancellation is asyncio cancellation: when the
turn is interrupted or the run is cancelled, the task running the tool is cancelled
and the tool must stop at once; ``bash`` then ends its whole process group (SIGTERM,
then SIGKILL after ``context.kill_grace_s``). A tool never raises for bad arguments or
a failing command: it returns ``(message, True)``.

Output is capped (:data:`OUTPUT_CAP_BYTES`): a longer output keeps its head and tail
around a marker that says how many bytes were left out.

Built-in tools: ``bash {command, timeout_s?}``, ``read {path}``, ``write {path,
content}``, ``edit {path, old, new}``; which of them a run gets is
:mod:`tether.agent.toolset`'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from tether import reaper
from tether.agent.provider import ToolSpec
from tether.procs import NEW_GROUP, kill_group, terminate_group

if TYPE_CHECKING:
    from tether.agent.desk import Desk

__all__ = [
    "OUTPUT_CAP_BYTES",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "cap_output",
]

OUTPUT_CAP_BYTES: Final = 100_000
DEFAULT_TIMEOUT_S: Final = 120.0
MAX_TIMEOUT_S: Final = 3600.0
KILL_GRACE_S: Final = 0.2
# After bash exits, how long to wait for background processes to close the output pipe.
PIPE_LINGER_S: Final = 0.5
MAX_READ_BYTES: Final = 16 * 1024 * 1024

ToolOutput = tuple[str, bool]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may rely on: where to run, with which environment, how fast to die."""

    cwd: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    kill_grace_s: float = KILL_GRACE_S
    output_cap: int = OUTPUT_CAP_BYTES
    # the run's approval desk: rules (and, with `approval="ask"`, a person) decide each
    # call before it runs; the `ask` tool's questions wait there too
    desk: Desk | None = None

    def resolve(self, path: str) -> Path:
        """``path`` relative to the working directory (absolute paths stay as they are)."""
        return self.cwd / os.path.expanduser(path)


class Tool(Protocol):
    """One callable tool. ``run`` must honour asyncio cancellation promptly."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput: ...


class ToolRegistry:
    """The tools offered to the model, by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ToolSpec(t.name, t.description, t.parameters) for t in self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    async def call(
        self, name: str, arguments: Mapping[str, Any], context: ToolContext
    ) -> ToolOutput:
        """Run tool ``name``; an unknown tool or a tool that raises is an error result, and
        so is a call the run's approval desk denies (it is not run; the result says why)."""
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return f"unknown tool {name!r} (available: {available})", True
        if not isinstance(arguments, Mapping):
            return f"{name}: arguments must be a JSON object", True
        if context.desk is not None:
            verdict = await context.desk.builtin(name, arguments, str(context.cwd))
            if verdict is not None and not verdict.approved:
                return f"{name} was not run: {verdict.note()}", True
        try:
            return await tool.run(arguments, context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool bug becomes an error result
            return f"{name} failed: {type(exc).__name__}: {exc}", True


# --- output capping ---------------------------------------------------------------------


def cap_output(data: bytes, cap: int = OUTPUT_CAP_BYTES, *, total: int | None = None) -> str:
    """Decode ``data`` (UTF-8, invalid bytes replaced), keeping head and tail within ``cap``.

    ``total`` is the real size when ``data`` is already a head+tail sample of it.
    """
    size = len(data) if total is None else total
    if size <= cap and len(data) == size:
        return data.decode("utf-8", "replace")
    half = cap // 2
    head, tail = data[:half], data[len(data) - half :] if half else b""
    omitted = size - len(head) - len(tail)
    marker = f"\n[... {omitted} bytes omitted (output capped at {cap} bytes) ...]\n"
    return head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")


class _HeadTail:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        return cap_output(bytes(self.head + self.tail), self.cap, total=self.total)


# --- argument helpers -------------------------------------------------------------------


def _str_arg(arguments: Mapping[str, Any], key: str, tool: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise _ArgumentError(f"{tool}: argument {key!r} must be a string")
    return value


class _ArgumentError(ValueError):
    pass


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_STRING = {"type": "string"}


# --- bash -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BashTool:
    name: str = "bash"
    description: str = (
        "Run a shell command with bash -c in the working directory. Output (stdout and "
        "stderr together) is capped; a non-zero exit status is an error. timeout_s "
        f"defaults to {int(DEFAULT_TIMEOUT_S)} seconds."
    )
    parameters: dict[str, Any] = field(
        default_factory=lambda: _schema(
            {"command": _STRING, "timeout_s": {"type": "number", "exclusiveMinimum": 0}},
            ["command"],
        )
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            command = _str_arg(arguments, "command", self.name)
            timeout = _timeout(arguments.get("timeout_s"))
        except _ArgumentError as exc:
            return str(exc), True
        sink = _HeadTail(context.output_cap)
        try:
            transport, protocol = await _spawn(command, sink, context)
        except OSError as exc:
            return f"bash: cannot start: {exc}", True
        try:
            return await _supervise(transport, protocol, timeout, context)
        finally:
            transport.close()


async def _spawn(
    command: str, sink: _HeadTail, context: ToolContext
) -> tuple[asyncio.SubprocessTransport, _BashProtocol]:
    """Start ``bash -c`` in a new process group; a cancel during the start ends the group.

    (Cancelled mid-start, asyncio kills only the leader: anything it had already forked
    would survive, so the start is shielded and the group ended here instead.)
    """
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _BashProtocol(sink),
            "bash",
            "-c",
            command,
            cwd=context.cwd,
            env=reaper.marked_env(context.env),  # ended by the reaper if this process dies
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            **NEW_GROUP,
        )
    )
    try:
        started = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        await asyncio.wait({spawn})
        if not spawn.cancelled() and spawn.exception() is None:
            transport, _ = spawn.result()
            try:
                await terminate_group(transport.get_pid(), context.kill_grace_s)
            finally:
                kill_group(transport.get_pid())
                transport.close()
        raise
    reaper.track(started[0].get_pid())
    return started


def _timeout(value: object) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _ArgumentError("bash: timeout_s must be a positive number of seconds")
    return min(float(value), MAX_TIMEOUT_S)


class _BashProtocol(asyncio.SubprocessProtocol):
    """Collects output; tells apart "bash exited" from "every writer closed the pipe".

    (``asyncio.subprocess.Process.wait`` waits for both, so a background job that keeps
    the pipe open would hold the call until it ends.)
    """

    def __init__(self, sink: _HeadTail) -> None:
        self.sink = sink
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.sink.feed(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.closed.set()

    def process_exited(self) -> None:
        self.exited.set()


async def _supervise(
    transport: asyncio.SubprocessTransport,
    protocol: _BashProtocol,
    limit_s: float,
    context: ToolContext,
) -> ToolOutput:
    """Wait for exit or timeout; end the whole group on any way out (cancellation too)."""
    pgid = transport.get_pid()
    timed_out = False
    try:
        try:
            await asyncio.wait_for(protocol.exited.wait(), limit_s)
        except TimeoutError:
            timed_out = True
        if not timed_out:
            # Background jobs may hold the pipe open: give them a moment, then end them.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(protocol.closed.wait(), PIPE_LINGER_S)
    finally:
        try:
            await terminate_group(pgid, context.kill_grace_s)
        finally:
            kill_group(pgid)
            reaper.untrack(pgid)
    text = protocol.sink.text()
    if timed_out:
        return _join(text, f"[command timed out after {limit_s:g} s and was killed]"), True
    code = transport.get_returncode()
    if code:
        detail = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return _join(text, f"[{detail}]"), True
    return text, False


def _join(text: str, note: str) -> str:
    return f"{text}\n{note}" if text and not text.endswith("\n") else f"{text}{note}"


# --- files ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadTool:
    name: str = "read"
    description: str = "Read a text file (path relative to the working directory)."
    parameters: dict[str, Any] = field(default_factory=lambda: _schema({"path": _STRING}, ["path"]))

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            path = context.resolve(_str_arg(arguments, "path", self.name))
        except _ArgumentError as exc:
            return str(exc), True
        return await asyncio.to_thread(_read, path, context.output_cap)


def _read(path: Path, cap: int) -> ToolOutput:
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= MAX_READ_BYTES:
                return cap_output(handle.read(MAX_READ_BYTES), cap), False
            head = handle.read(cap // 2)
            handle.seek(max(size - cap // 2, 0))
            return cap_output(head + handle.read(cap // 2), cap, total=size), False
    except OSError as exc:
        return f"read: {path}: {exc.strerror or exc}", True


@dataclass(frozen=True, slots=True)
class WriteTool:
    name: str = "write"
    description: str = "Write a text file (created with its parent directories, or replaced whole)."
    parameters: dict[str, Any] = field(
        default_factory=lambda: _schema({"path": _STRING, "content": _STRING}, ["path", "content"])
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            path = context.resolve(_str_arg(arguments, "path", self.name))
            content = _str_arg(arguments, "content", self.name)
        except _ArgumentError as exc:
            return str(exc), True
        return await asyncio.to_thread(_write, path, content)


def _write(path: Path, content: str) -> ToolOutput:
    data = content.encode("utf-8", "surrogatepass")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        return f"write: {path}: {exc.strerror or exc}", True
    return f"wrote {len(data)} bytes to {path}", False


@dataclass(frozen=True, slots=True)
class EditTool:
    name: str = "edit"
    description: str = (
        "Replace the one occurrence of `old` in a text file with `new`. Fails when `old` "
        "is missing or occurs more than once (add context to make it unique)."
    )
    parameters: dict[str, Any] = field(
        default_factory=lambda: _schema(
            {"path": _STRING, "old": _STRING, "new": _STRING}, ["path", "old", "new"]
        )
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            path = context.resolve(_str_arg(arguments, "path", self.name))
            old = _str_arg(arguments, "old", self.name)
            new = _str_arg(arguments, "new", self.name)
        except _ArgumentError as exc:
            return str(exc), True
        return await asyncio.to_thread(_edit, path, old, new)


def _edit(path: Path, old: str, new: str) -> ToolOutput:
    if not old:
        return "edit: `old` must not be empty", True
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"edit: {path}: {exc}", True
    count = text.count(old)
    if count != 1:
        where = "not found" if count == 0 else f"found {count} times"
        return f"edit: `old` {where} in {path}; it must occur exactly once", True
    try:
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
    except OSError as exc:
        return f"edit: {path}: {exc.strerror or exc}", True
    return f"edited {path}", False
