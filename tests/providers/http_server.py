"""A real HTTP/1.1 server on 127.0.0.1 that plays scripted replies byte for byte.

Each accepted request is recorded (method, path, headers, body) and answered with the
next :class:`Reply`: a status, headers and a body delivered in chosen pieces, with
chunked transfer encoding (each piece one chunk), a Content-Length, or read-to-close.
``end`` decides how the reply finishes: ``complete``, ``drop`` (close the socket in the
middle of the body) or ``stall`` (stop sending and keep the connection open).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.support.waits import loop_pass
from tether.agent.provider import ModelRequest, Provider, ProviderError, StreamEvent

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    pieces: Literal["whole", "bytes"] | int = "whole"  # int: pieces of that many bytes
    framing: Literal["chunked", "length", "close"] = "chunked"
    end: Literal["complete", "drop", "stall"] = "complete"
    drop_after: int | None = None  # for end="drop"/"stall": bytes of the body sent first


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    429: "Too Many Requests",
    500: "Internal Server Error",
    529: "Overloaded",
}


class LocalServer:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[Recorded] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> LocalServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        if self._handlers:
            await asyncio.wait(self._handlers)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                reply = self.replies.pop(0) if self.replies else Reply(status=500, body=b"{}")
                keep = await _write_reply(writer, reply)
                if reply.end == "stall":
                    await reader.read()  # until the client gives up
                    return
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)


async def _read_request(reader: asyncio.StreamReader) -> Recorded | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Recorded(method, path, headers, body)


def _split(body: bytes, pieces: Literal["whole", "bytes"] | int) -> list[bytes]:
    size = {"whole": max(len(body), 1), "bytes": 1}.get(str(pieces)) or int(pieces)
    return [body[i : i + size] for i in range(0, len(body), size)]


async def _write_reply(writer: asyncio.StreamWriter, reply: Reply) -> bool:
    head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
    head += [f"{k}: {v}" for k, v in reply.headers.items()]
    if reply.framing == "chunked":
        head.append("transfer-encoding: chunked")
    elif reply.framing == "length":
        head.append(f"content-length: {len(reply.body)}")
    else:
        head.append("connection: close")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    body = reply.body
    if reply.end != "complete":
        body = body[: reply.drop_after if reply.drop_after is not None else len(body) // 2]
    for piece in _split(body, reply.pieces):
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if reply.framing == "chunked" else piece)
        await writer.drain()
        if reply.pieces != "whole":
            await loop_pass()  # the client reads this piece on its own
    if reply.end == "complete" and reply.framing == "chunked":
        writer.write(b"0\r\n\r\n")
    await writer.drain()
    return reply.end == "complete" and reply.framing != "close"


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def collect(
    provider: Provider, request: ModelRequest
) -> tuple[list[StreamEvent], ProviderError | None]:
    """Every event the provider streams for ``request``, and the error that ended it, if any."""
    events: list[StreamEvent] = []
    try:
        async for event in provider.stream(request):
            events.append(event)
    except ProviderError as exc:
        return events, exc
    finally:
        await provider.aclose()
    return events, None
