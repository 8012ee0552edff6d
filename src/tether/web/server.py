"""Run the dashboard: bind, print the URL with a fresh token, serve until a signal.

Nothing listens beyond loopback (127.0.0.1) unless ``listen`` names another address; then
that address is also an allowed Host. The URL printed carries the token; anyone without it
gets 401 (:mod:`tether.web.security`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import webbrowser
from pathlib import Path
from typing import TextIO

from tether.web.app import Dashboard
from tether.web.http import serve_connection
from tether.web.security import Policy, allowed_hosts, new_token

LOOPBACK = "127.0.0.1"


async def serve(
    socket_path: Path,
    *,
    port: int = 0,
    listen: str | None = None,
    open_browser: bool = False,
    out: TextIO = sys.stdout,
    token: str | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation)."""
    host = listen or LOOPBACK
    holder: list[Dashboard] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        app = holder[0]
        await serve_connection(
            reader, writer, gate=app.gate, handle=app.handle, websocket=app.websocket
        )

    server = await asyncio.start_server(on_client, host=host, port=port)
    bound = server.sockets[0].getsockname()[1]
    policy = Policy(token or new_token(), allowed_hosts(bound, listen))
    app = Dashboard(socket_path, policy)
    holder.append(app)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/?token={policy.token}"
    print(f"tether dashboard: {url}", file=out, flush=True)
    if open_browser:
        with contextlib.suppress(Exception):
            webbrowser.open(url)
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


__all__ = ["serve"]
