"""The method registry and handler failure mapping, with a Daemon served in this process
on a real Unix socket (the way tether.daemon.app installs ``agent.*``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support import clock
from tests.support.waits import loop_pass

from tether.daemon.channels.hub import ChannelHub
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonCallError
from tether.daemon.rpc.config import ServerConfig
from tether.daemon.rpc.lifecycle import bind_socket, ensure_socket_dir
from tether.daemon.rpc.methods import MethodRegistry, RpcFailure, decode_params
from tether.daemon.rpc.protocol import MAX_FRAME_BYTES, ErrorCode
from tether.daemon.rpc.server import CallContext, Daemon


class NameParams(msgspec.Struct):
    name: str


def status(context: CallContext, params: Any) -> dict[str, Any]:
    args = decode_params(params, NameParams)
    if args.name == "ghost":
        raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, "no such agent")
    connection = context.connection  # None for an in-process call (Daemon.answer)
    return {"name": args.name, "peer": connection is not None and connection.peer_pid is not None}


def boom(context: CallContext, params: Any) -> None:
    raise RuntimeError("kaboom")


async def slow_boom(context: CallContext, params: Any) -> None:
    await loop_pass()  # it fails after a suspension
    raise KeyError("missing")


def huge(context: CallContext, params: Any) -> str:
    return "x" * MAX_FRAME_BYTES


def unencodable(context: CallContext, params: Any) -> object:
    return object()


STARTED: dict[str, asyncio.Event] = {}


async def forever(context: CallContext, params: Any) -> None:
    if "forever" in STARTED:
        STARTED["forever"].set()
    await asyncio.Event().wait()


def serve_with(
    tmp: Path,
    body: Callable[[Daemon, AsyncDaemonClient], Awaitable[None]],
    run: Callable[[Any], Any] = asyncio.run,
) -> None:
    """Serve the fakes below in this process (``run``: the loop to serve on, a virtual
    clock's for the timers)."""

    async def main() -> None:
        ensure_socket_dir(tmp / "rt")
        path = tmp / "rt" / "d.sock"
        daemon = Daemon(ServerConfig(socket_path=path, shutdown_grace_s=2.0))
        # channel.* only: the fakes below stand where tether.daemon.fleet.verbs' handlers would
        ChannelHub().install(daemon)
        for method, handler in [
            ("agent.status", status),
            ("agent.boom", boom),
            ("agent.slow_boom", slow_boom),
            ("agent.huge", huge),
            ("agent.unencodable", unencodable),
            ("agent.forever", forever),
        ]:
            daemon.methods.register(method, handler)
        server = asyncio.ensure_future(daemon.serve(bind_socket(path, backlog=64)))
        client = await AsyncDaemonClient.open(path)
        try:
            await body(daemon, client)
        finally:
            daemon.request_stop()
            await server
            await client.close()

    run(main())


async def expect(
    client: AsyncDaemonClient, code: ErrorCode, method: str, params: Any = None
) -> str:
    with pytest.raises(DaemonCallError) as info:
        await client.call(method, params)
    assert info.value.code is code
    return info.value.message


def test_registered_handlers_answer_and_fail_with_codes(short_tmp: Path) -> None:
    async def body(daemon: Daemon, client: AsyncDaemonClient) -> None:
        assert await client.call("agent.status", {"name": "a"}) == {"name": "a", "peer": True}
        await expect(client, ErrorCode.AGENT_NOT_FOUND, "agent.status", {"name": "ghost"})
        await expect(client, ErrorCode.INVALID_PARAMS, "agent.status", {"name": 3})
        await expect(client, ErrorCode.INVALID_PARAMS, "agent.status")
        message = await expect(client, ErrorCode.INTERNAL, "agent.boom")
        assert "RuntimeError: kaboom" in message
        await expect(client, ErrorCode.INTERNAL, "agent.slow_boom")
        assert "unencodable" in await expect(client, ErrorCode.INTERNAL, "agent.unencodable")
        assert "exceeds max size" in await expect(client, ErrorCode.INTERNAL, "agent.huge")
        # The daemon and the connection are still up.
        assert await client.call("agent.status", {"name": "b"}) == {"name": "b", "peer": True}
        assert "agent.status" in (await client.call("daemon.status"))["methods"]

    serve_with(short_tmp, body)


def test_shutdown_cuts_blocking_calls_with_shutting_down(short_tmp: Path) -> None:
    async def body(daemon: Daemon, client: AsyncDaemonClient) -> None:
        STARTED["forever"] = started = asyncio.Event()
        pending = asyncio.ensure_future(client.call_response("agent.forever"))
        await started.wait()
        assert daemon.statistics().in_flight == 1
        daemon.request_stop()
        response = await pending
        assert response.error is not msgspec.UNSET
        assert response.error.code is ErrorCode.SHUTTING_DOWN  # type: ignore[union-attr]

    serve_with(short_tmp, body)


def test_in_process_calls_get_the_sockets_answers_and_count_in_flight(short_tmp: Path) -> None:
    """``Daemon.answer`` (a host link's calls) goes through the socket's one dispatch: the
    same results and codes, an answer body without the frame prefix, no connection for a
    handler (``context.socket()`` refuses), and calls in flight hold ``quiet`` back."""
    from tether.daemon.rpc.protocol import Request, decode_response

    async def ask(daemon: Daemon, method: str, params: Any = None) -> Any:
        return decode_response(await daemon.answer(Request(9, method, params)))

    async def body(daemon: Daemon, client: AsyncDaemonClient) -> None:
        ok = await ask(daemon, "agent.status", {"name": "a"})
        assert (ok.id, ok.result) == (9, {"name": "a", "peer": False})  # no connection
        codes = [
            (await ask(daemon, "agent.nope")).error.code,
            (await ask(daemon, "agent.status", {"name": "ghost"})).error.code,
            (await ask(daemon, "agent.boom")).error.code,
            (await ask(daemon, "agent.slow_boom")).error.code,
            (await ask(daemon, "channel.register_channel", {"cc_session_id": "s"})).error.code,
        ]
        assert codes == [
            ErrorCode.UNKNOWN_METHOD,
            ErrorCode.AGENT_NOT_FOUND,
            ErrorCode.INTERNAL,
            ErrorCode.INTERNAL,
            ErrorCode.INVALID_PARAMS,  # it needs a live socket connection
        ]
        assert await daemon.quiet(0.0)
        started = STARTED["forever"] = asyncio.Event()
        call = asyncio.ensure_future(ask(daemon, "agent.forever"))
        await started.wait()
        del STARTED["forever"]
        assert daemon.statistics().in_flight == 1
        assert not await daemon.quiet(0.05)  # a call in flight: background work waits
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        assert await daemon.quiet(1.0)
        assert daemon.statistics().in_flight == 0

    serve_with(short_tmp, body)


def test_registry_rules() -> None:
    registry = MethodRegistry()
    registry.register("agent.spawn", status)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("agent.spawn", status)
    with pytest.raises(ValueError, match="not in a known namespace"):
        registry.register("daemon.other", status)
    registry.register("daemon.other", status, extension=True)
    entry = registry.get("agent.spawn")
    assert entry is not None
    assert not entry.is_async
    registry.register("agent.forever", forever)
    forever_entry = registry.get("agent.forever")
    assert forever_entry is not None
    assert forever_entry.is_async
    assert registry.methods() == ["agent.forever", "agent.spawn", "daemon.other"]


# -- the frame timer, on a virtual clock (tests/support/clock.py) ------------------------


async def _raw_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    size = int.from_bytes(await reader.readexactly(4), "little")
    frame: dict[str, Any] = msgspec.json.decode(await reader.readexactly(size))
    return frame


def _frame_deadline(tmp: Path, complete_at: float | None) -> tuple[dict[str, Any], float]:
    """A frame whose first bytes come at 0 s and the rest at ``complete_at`` (None: never):
    the daemon's answer and the clock's time when it came."""
    whole = msgspec.json.encode({"id": 7, "method": "agent.status", "params": {"name": "a"}})
    head = len(whole).to_bytes(4, "little") + whole[:5]
    got: list[tuple[dict[str, Any], float]] = []

    async def body(daemon: Daemon, _client: AsyncDaemonClient) -> None:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_unix_connection(str(daemon.config.socket_path))
        start = loop.time()
        writer.write(head)
        if complete_at is not None:
            loop.call_later(complete_at, writer.write, whole[5:])
        got.append((await _raw_frame(reader), loop.time() - start))
        writer.close()

    serve_with(tmp, body, run=clock.run)
    return got[0]


def test_a_frame_is_cut_when_its_time_from_its_first_byte_is_up(short_tmp: Path) -> None:
    timeout = ServerConfig(socket_path=short_tmp).frame_timeout_s
    reply, at = _frame_deadline(short_tmp, complete_at=None)
    assert at == timeout
    assert reply["error"]["code"] == ErrorCode.MALFORMED_FRAME.value
    assert f"not completed within {timeout:g}s" in reply["error"]["message"]


def test_a_frame_completed_just_in_time_is_answered(short_tmp: Path) -> None:
    timeout = ServerConfig(socket_path=short_tmp).frame_timeout_s
    reply, at = _frame_deadline(short_tmp, complete_at=timeout - 1)
    assert at == timeout - 1
    assert reply == {**reply, "id": 7, "result": {"name": "a", "peer": True}}
