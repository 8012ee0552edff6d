"""Attacks on ``tether dashboard``'s HTTP server by a client without the token (another local
user, a page in the user's browser): slowloris and slot exhaustion.

The trickle test runs :func:`tether.web.http.serve_connection` in this process with a short
request deadline; the slot test runs a real ``tether dashboard`` beside a real daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import stat
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from test_dashboard_api import request, token
from tests.support.agentd import AgentDaemon, agentd
from tests.support.clock import run
from tests.support.dashboard import start_dashboard
from tests.support.waits import wait_until

from tether.web import http

__all__ = ["agentd"]

TRICKLE_GAP_S = 1.0  # the attacker's pace: far below the deadline, so only a total bound ends it


def test_attack_a_trickling_request_is_closed_at_its_deadline() -> None:
    """One byte at a time, each well inside the old per-read wait, never finishing the head:
    the connection is closed once the whole request is overdue, at exactly ``IDLE_S`` on the
    loop's virtual clock (tests/support/clock.py), and others are served meanwhile (before:
    every byte restarted the wait, so it was held for ever)."""

    async def handle(_request: http.Request) -> http.Response:
        return http.Response.json({"ok": True})

    async def no_socket(_request: http.Request, _socket: http.ServerSocket) -> None:
        raise AssertionError("no WebSocket here")

    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        server = await asyncio.start_server(
            lambda r, w: http.serve_connection(
                r, w, gate=lambda _r: None, handle=handle, websocket=no_socket
            ),
            "127.0.0.1",
            0,
        )
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sent = 0
            closed = asyncio.ensure_future(reader.read())
            # bounded by the test's own patience (1,000 bytes), not by a clock check
            while not closed.done() and sent < 1000:
                writer.write(b"a")
                sent += 1
                await asyncio.wait({closed}, timeout=TRICKLE_GAP_S)
                if sent == 5:  # a normal client is served while the trickle goes on
                    other_reader, other_writer = await asyncio.open_connection("127.0.0.1", port)
                    other_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    assert (await other_reader.read()).startswith(b"HTTP/1.1 200")
                    other_writer.close()
            assert closed.done(), f"still open after {sent} trickled bytes"
            closed_at = loop.time()
            # closed without an answer (a reset when our last bytes were still unread)
            assert isinstance(closed.exception(), ConnectionResetError) or closed.result() == b""
            writer.close()
            return sent, closed_at

    sent, closed_at = run(main())
    assert closed_at == http.IDLE_S  # the whole request's deadline, not a byte's
    assert sent <= http.IDLE_S / TRICKLE_GAP_S + 1  # a byte each gap until then


def test_attack_slow_clients_cannot_lock_the_page_out(agentd: AgentDaemon) -> None:
    """Every slot held by a client that sent half a request head and no token: the page
    is still served (the longest-waiting one is closed to admit it); before, 503."""
    with start_dashboard(agentd, "--max-connections", "3") as dash:
        held = [socket.create_connection(("127.0.0.1", dash.port), timeout=30) for _ in range(3)]
        try:
            for sock in held:
                sock.sendall(b"GET /api/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
            status, _, body = request(dash, "GET", "/api/agents", headers=token(dash))
            assert status == 200, body
            assert closed_unanswered(held[0])  # the oldest, to admit it
        finally:
            for sock in held:
                sock.close()


def closed_unanswered(sock: socket.socket) -> bool:
    """The server closed ``sock`` without a byte of answer (a reset: it had unread bytes)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_attack_open_keeps_the_token_off_every_command_line(
    agentd: AgentDaemon, tmp_path: Path
) -> None:
    """``--open`` with ``$BROWSER`` a program that records its argv: the token is not in it
    (every local user can read ``/proc/PID/cmdline``); the browser gets a private file
    that redirects to the URL (before: the URL with its token was the argument)."""
    record = tmp_path / "argv.json"
    browser = tmp_path / "browser"
    browser.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    browser.chmod(0o700)
    agentd.env["BROWSER"] = str(browser)
    try:
        with start_dashboard(agentd, "--open") as dash:
            argv = wait_for_json(record)
            assert all(dash.token not in arg for arg in argv), argv
            [uri] = argv
            page = Path(urlsplit(uri).path)
            assert dash.token in page.read_text()
            assert stat.S_IMODE(page.stat().st_mode) == 0o600
            assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        assert not page.exists()  # removed when the dashboard stopped
    finally:
        del agentd.env["BROWSER"]


def wait_for_json(path: Path) -> Any:
    """The JSON the browser double wrote (it writes once, then exits): read as it changes."""

    def written() -> list[Any] | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return [json.loads(path.read_text())]
        return None

    return wait_until(written, f"the browser double's {path.name}", files=[path])[0]


def test_attack_pipelining_clients_that_never_read_cannot_lock_the_page_out(
    agentd: AgentDaemon,
) -> None:
    """Clients without the token pipeline megabytes of requests and never read: each is
    answered once and closed (and may be evicted while its answer drains), so the user's
    request with the token is served (before: 503 for as long as they stayed)."""
    burst = b"GET /api/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 130_000  # ~6 MB
    with start_dashboard(agentd, "--max-connections", "4") as dash:
        clients = [socket.create_connection(("127.0.0.1", dash.port), timeout=5) for _ in range(4)]
        try:
            for sock in clients:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                with contextlib.suppress(OSError):  # the server may hang up mid-burst
                    sock.sendall(burst)
            status, _, body = request(dash, "GET", "/api/agents", headers=token(dash))
            assert status == 200, body
        finally:
            for sock in clients:
                sock.close()


def test_attack_an_answer_nobody_reads_ends_the_connection() -> None:
    """A client with every right pipelines requests for big answers and never reads: the
    write is bounded too (``WRITE_S``), so the connection ends instead of holding its slot
    for ever: at exactly ``WRITE_S`` on the loop's virtual clock."""

    async def handle(_request: http.Request) -> http.Response:
        return http.Response(200, b"x" * (1 << 20), "text/plain")

    async def no_socket(_request: http.Request, _socket: http.ServerSocket) -> None:
        raise AssertionError("no WebSocket here")

    async def main() -> float:
        ended = asyncio.Event()

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await http.serve_connection(
                    r, w, gate=lambda _r: None, handle=handle, websocket=no_socket
                )
            finally:
                ended.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 64)
            await ended.wait()  # the clock jumps to the write's deadline: nothing else is due
            sock.close()
        return asyncio.get_running_loop().time()

    assert run(main()) == http.WRITE_S


def test_attack_dropped_event_streams_leave_no_follow_in_the_daemon(agentd: AgentDaemon) -> None:
    """A tab that reloads: WebSockets following an idle agent's events, dropped without a
    close frame. The dashboard's daemon connections must all go (before: each stayed, its
    follow waiting for events that never came after the client hung up, until the daemon
    answered everyone `busy`)."""
    from websockets.sync.client import connect

    agentd.spawn("idle", [{"text": "hello"}], task="go")
    agentd.wait_for("idle", lambda s: s["state"] == "ready")
    with start_dashboard(agentd) as dash:
        baseline = agentd.call("daemon.status")["connections"]
        url = f"ws://127.0.0.1:{dash.port}/api/agents/idle/events?token={dash.token}"
        origin = f"http://127.0.0.1:{dash.port}"
        with contextlib.ExitStack() as stack:
            for _ in range(20):
                ws = stack.enter_context(connect(url, origin=origin, open_timeout=20))  # type: ignore[arg-type]
                assert json.loads(ws.recv(timeout=20))["type"] == "event"  # its follow is live
                stack.callback(ws.socket.close)  # dropped: no close frame
            assert agentd.call("daemon.status")["connections"] >= baseline + 20
            stack.pop_all().close()
        wait_until(  # (the daemon's count: polled)
            lambda: agentd.call("daemon.status")["connections"] <= baseline, "their ends"
        )
