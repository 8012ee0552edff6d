"""Run the dashboard: bind, print the URL with a fresh token, serve until a signal.

Nothing listens beyond loopback (127.0.0.1) unless ``listen`` names another address; then
that address is also an allowed Host. The URL printed carries the token; anyone without it
gets 401 (:mod:`tether.web.security`). At most ``max_connections`` connections are served at
once (each holds a task and its buffers). One more is admitted by closing the connection that
has waited longest for a request (:class:`~tether.web.http.Waiting`: a slow, idle or
token-less client cannot hold every slot and lock the page out); only when every slot is
busy (a request being answered, an open WebSocket) is it answered 503 and closed at once,
before a byte of its request is read, so a client opening sockets in a loop cannot grow
memory.

``open_browser`` never puts the token on a command line (``/proc/PID/cmdline`` is readable
by every local user): the browser is given a private file (0600, in the 0700 runtime
directory) that redirects to the URL, removed when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import os
import signal
import sys
import webbrowser
from pathlib import Path
from typing import Final, TextIO

from tether import fsafe, paths
from tether.web.app import Dashboard
from tether.web.http import Waiting, serve_connection
from tether.web.security import Policy, allowed_hosts, new_token

LOOPBACK = "127.0.0.1"
MAX_CONNECTIONS: Final = 128
BUSY_RESPONSE: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n"
)


async def serve(
    socket_path: Path,
    *,
    port: int = 0,
    listen: str | None = None,
    open_browser: bool = False,
    out: TextIO = sys.stdout,
    token: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation)."""
    host = listen or LOOPBACK
    holder: list[Dashboard] = []
    open_connections = 0
    waiting = Waiting()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_connections
        if open_connections >= max_connections and not waiting.close_oldest():
            await _refuse_busy(writer)
            return
        open_connections += 1
        try:
            app = holder[0]
            await serve_connection(
                reader,
                writer,
                gate=app.gate,
                handle=app.handle,
                websocket=app.websocket,
                waiting=waiting,
            )
        finally:
            open_connections -= 1

    server = await asyncio.start_server(on_client, host=host, port=port)
    bound = server.sockets[0].getsockname()[1]
    policy = Policy(token or new_token(), allowed_hosts(bound, listen))
    app = Dashboard(socket_path, policy)
    holder.append(app)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/?token={policy.token}"
    print(f"tether dashboard: {url}", file=out, flush=True)
    page = _open_browser(url, bound) if open_browser else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        async with server:
            await stop.wait()
    finally:
        await app.aclose()
        if page is not None:
            with contextlib.suppress(OSError):
                os.unlink(page)


def _open_browser(url: str, port: int) -> Path | None:
    """Open ``url`` through a private redirect file (see the module docstring); the file,
    or None when none could be written (then the printed URL is the way in)."""
    try:
        page = paths.ensure_private_dir(paths.runtime_dir()) / f"dashboard-{port}.html"
        target = html.escape(url)
        fsafe.replace_file(
            page,
            f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
            f'<a href="{target}">tether dashboard</a>\n'.encode(),
        )
    except OSError as exc:
        print(f"tether dashboard: not opening a browser: {exc}", file=sys.stderr)
        return None
    # in a thread: a browser command that waits (``$BROWSER``) must not stall the server
    asyncio.get_running_loop().run_in_executor(None, _open_quietly, page.as_uri())
    return page


def _open_quietly(uri: str) -> None:
    with contextlib.suppress(webbrowser.Error, OSError):
        webbrowser.open(uri)


async def _refuse_busy(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        writer.write(BUSY_RESPONSE)
        writer.close()
        await writer.wait_closed()


__all__ = ["MAX_CONNECTIONS", "serve"]
