"""The ``command`` provider: any CLI as a model, one process per model call.

The command comes from option ``command`` (shell words, split with :func:`shlex.split`,
no shell involved) or ``$TETHER_COMMAND_PROVIDER``. Each call starts it in a new process
group, writes the conversation to its stdin as one JSON object and closes stdin::

    {"model": "...", "system": "...", "max_tokens": 8192, "thinking_budget": null,
     "tool_choice": "auto" | "none",
     "tools": [{"name": "...", "description": "...", "parameters": {JSON Schema}}],
     "messages": [
       {"role": "user", "content": "text"},
       {"role": "assistant", "content": [
          {"type": "text", "text": "..."},
          {"type": "thinking", "thinking": "...", "signature": "..." | null},
          {"type": "tool_use", "id": "...", "name": "...", "input": {...}}]},
       {"role": "tool", "tool_call_id": "...", "name": "...", "content": "...",
        "is_error": false}]}

Its stdout, decoded as UTF-8 (invalid bytes replaced), streams back as TextDelta chunks
(block 0) as they arrive; the command cannot call tools. Exit status 0 ends the call with
``Finished("end_turn")``; any other status is a ProviderError quoting the tail of stderr.
When the call ends, is cancelled or fails, the whole process group gets SIGTERM, then
SIGKILL after ``kill_grace`` seconds (option, default 2) if any member is still alive; a
member that keeps stdout open after the command exits is treated the same way.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shlex
import signal
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import reaper
from tether.agent.provider import (
    AssistantTurn,
    BlockEnd,
    ConversationItem,
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ToolOutcome,
    ToolUse,
)
from tether.agent.providers import Options

ENV_COMMAND: Final = "TETHER_COMMAND_PROVIDER"
DEFAULT_KILL_GRACE_S: Final = 2.0
MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024
STDERR_TAIL_BYTES: Final = 4096
_READ_CHUNK: Final = 65536
_POLL_S: Final = 0.02
_EXIT_POLL_S: Final = 0.05


class CommandProvider:
    """Options: ``command`` (else ``$TETHER_COMMAND_PROVIDER``), ``kill_grace`` (seconds)."""

    name = "command"

    def __init__(
        self,
        *,
        model: str = "",
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        opts = Options(self.name, options, frozenset({"command", "kill_grace"}))
        source = os.environ if env is None else env
        self.model = model
        self._child_env = None if env is None else dict(env)
        self.kill_grace = opts.number("kill_grace", DEFAULT_KILL_GRACE_S)
        raw = opts.text("command") or source.get(ENV_COMMAND, "")
        self.argv: list[str] = []
        self._config_error = opts.error
        try:
            self.argv = shlex.split(raw)
        except ValueError as exc:
            self._config_error = self._config_error or ProviderError(
                f"command: cannot parse the command {raw!r}: {exc}"
            )
        if not self.argv and self._config_error is None:
            self._config_error = ProviderError(
                "command: no command given; pass --provider-option command='PROGRAM ARGS'"
                f" or set ${ENV_COMMAND}"
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        if self._config_error is not None:
            raise self._config_error
        payload = msgspec.json.encode(request_payload(request, default_model=self.model))
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=reaper.marked_env(self._child_env),  # ended if this process dies
                process_group=0,
            )
        except OSError as exc:
            raise ProviderError(
                f"command: cannot start {self.argv[0]!r}: {exc.strerror or exc};"
                " check --provider-option command"
            ) from exc
        reaper.track(proc.pid)
        run = _Run(proc, self.argv[0], self.kill_grace)
        try:
            async with contextlib.aclosing(run.events(payload)) as events:
                async for event in events:
                    yield event
        finally:
            await run.close()

    async def aclose(self) -> None:
        """Nothing to release between calls: each call's process is gone when it ends."""


def request_payload(request: ModelRequest, *, default_model: str = "") -> dict[str, Any]:
    """The JSON object written to the command's stdin (the format in the module docstring)."""
    return {
        "model": request.model or default_model,
        "system": request.system,
        "max_tokens": request.max_tokens,
        "thinking_budget": request.thinking_budget,
        "tool_choice": request.tool_choice,
        "tools": [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in request.tools
        ],
        "messages": [_message(item) for item in request.messages],
    }


def _message(item: ConversationItem) -> dict[str, Any]:
    if isinstance(item, ToolOutcome):
        return {
            "role": "tool",
            "tool_call_id": item.tool_call_id,
            "name": item.name,
            "content": item.content,
            "is_error": item.is_error,
        }
    if isinstance(item, AssistantTurn):
        return {"role": "assistant", "content": [_block(b) for b in item.blocks]}
    return {"role": "user", "content": item.text}


def _block(block: TextBlock | ThinkingBlock | ToolUse) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}


class _Run:
    """One running command: feeds stdin, streams stdout, keeps a stderr tail, cleans up."""

    def __init__(self, proc: asyncio.subprocess.Process, program: str, grace: float) -> None:
        self.proc = proc
        self.program = program
        self.grace = grace
        self.stderr_tail = bytearray()
        self._tasks: list[asyncio.Task[Any]] = []
        self._read: asyncio.Task[bytes] | None = None

    async def events(self, payload: bytes) -> AsyncGenerator[StreamEvent, None]:
        assert self.proc.stdout is not None
        self._tasks = [
            asyncio.create_task(self._feed_stdin(payload)),
            asyncio.create_task(self._drain_stderr()),
        ]
        exited = asyncio.create_task(self._wait_exit())
        self._tasks.append(exited)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        parts: list[str] = []
        total = 0
        async with contextlib.aclosing(self._stdout_chunks(exited)) as chunks:
            async for chunk in chunks:
                total += len(chunk)
                if total > MAX_OUTPUT_BYTES:
                    raise ProviderError(
                        f"command: {self.program} wrote more than {MAX_OUTPUT_BYTES} bytes; stopped"
                    )
                text = decoder.decode(chunk)
                if text:
                    parts.append(text)
                    yield TextDelta(0, text)
        text = decoder.decode(b"", final=True)
        if text:
            parts.append(text)
            yield TextDelta(0, text)
        status = await exited
        if status != 0:
            raise ProviderError(await self._failure(status))
        if parts:
            yield BlockEnd(0, TextBlock("".join(parts)))
        yield Finished("end_turn")

    async def _stdout_chunks(self, exited: asyncio.Task[int]) -> AsyncGenerator[bytes, None]:
        """Stdout until EOF; once the command exited, wait at most ``grace`` for EOF (a
        leftover child may hold the pipe open; :meth:`close` stops it)."""
        assert self.proc.stdout is not None
        while True:
            if self._read is None:
                self._read = asyncio.create_task(self.proc.stdout.read(_READ_CHUNK))
            waiting: set[asyncio.Task[Any]] = (
                {self._read} if exited.done() else {self._read, exited}
            )
            timeout = self.grace if exited.done() else None
            done, _ = await asyncio.wait(
                waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if self._read in done:
                chunk, self._read = self._read.result(), None
                if not chunk:
                    return
                yield chunk
            elif not done:
                return

    async def _wait_exit(self) -> int:
        """The exit status, as soon as the command exits. ``Process.wait()`` alone also
        waits for every pipe to close, which a leftover grandchild can delay forever."""
        waiter = asyncio.create_task(self.proc.wait())
        self._tasks.append(waiter)
        while self.proc.returncode is None:
            await asyncio.wait({waiter}, timeout=_EXIT_POLL_S)
        return self.proc.returncode

    async def _feed_stdin(self, payload: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(payload)
            await stdin.drain()
            stdin.close()
            await stdin.wait_closed()

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(_READ_CHUNK):
            self.stderr_tail += chunk
            del self.stderr_tail[:-STDERR_TAIL_BYTES]

    async def _failure(self, status: int) -> str:
        stderr_task = self._tasks[1]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(stderr_task), self.grace)
        if status < 0:
            try:
                what = f"was killed by {signal.Signals(-status).name}"
            except ValueError:
                what = f"was killed by signal {-status}"
        else:
            what = f"exited with status {status}"
        tail = self.stderr_tail.decode("utf-8", "replace").strip()
        lines = tail.splitlines()[-20:]
        detail = "\n".join(lines)[-2000:] if lines else "(no stderr output)"
        return f"command: {self.program} {what}: {detail}"

    async def close(self) -> None:
        """Stop the process group (SIGTERM, then SIGKILL after the grace), the helper
        tasks, and reap the process."""
        pgid = self.proc.pid
        try:
            if self.proc.returncode is None or _group_alive(pgid):
                _signal_group(pgid, signal.SIGTERM)
                await self._wait_group(pgid)
        finally:
            if self.proc.returncode is None or _group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
            tasks = [*self._tasks, *([self._read] if self._read is not None else [])]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reap(), self.grace + 1.0)
            reaper.untrack(pgid)

    async def _reap(self) -> None:
        """Wait for the exit and read both pipes to EOF so the transport closes cleanly."""
        await self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            while stream is not None and await stream.read(_READ_CHUNK):
                pass

    async def _wait_group(self, pgid: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        # Polled: a process group's exit has no event to await.
        while loop.time() < deadline and (  # noqa: ASYNC110
            self.proc.returncode is None or _group_alive(pgid)
        ):
            await asyncio.sleep(_POLL_S)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is still in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if entry.name.isdigit() and _member_state(entry / "stat", pgid) not in {None, "Z", "X"}:
            return True
    return False


def _member_state(stat: Path, pgid: int) -> str | None:
    """The state letter of the process whose ``/proc/PID/stat`` this is, if it is in ``pgid``."""
    try:
        raw = stat.read_bytes()
    except OSError:
        return None
    # Fields after the parenthesised command name: state ppid pgrp ...
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 3 or fields[2] != str(pgid).encode():
        return None
    return fields[0].decode("ascii", "replace")
