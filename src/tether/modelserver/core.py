"""The model server's core: HTTP, the script queue, the request log, the API interface.

Theory of operation: a :class:`ModelServer` is a threading HTTP/1.1 server on loopback.
Each request becomes an :class:`Exchange` (method, path, query, headers, the JSON body)
and goes to the first :class:`Api` whose ``handles`` accepts it; that API answers it,
usually by taking the next reply from the shared :class:`Script` (one reply per model
call, whatever the API) and streaming it as server-sent events with the reply's
``delay_ms`` / ``chunk_ms`` pauses. A request no API handles gets a 404 in JSON.

Every request is logged before it is answered: one JSON object per line in the log
file (``--log``, created 0600: it holds the prompts a CLI sent) and in
:attr:`ModelServer.requests`, with the API's name, the method, the path, the number of
the reply it got (or null) and the request body. Tests read the log to see what a CLI
really sent (the steer text that reached the model, the tools a finalize turn was
offered). Memory is bounded: :attr:`ModelServer.requests` keeps the last
:data:`KEPT_REQUESTS` entries, and the bodies of the newest :data:`KEPT_BODY_BYTES`
only (older entries keep their size, ``body`` becomes ``{"dropped": SIZE}``).

The script's replies are the user's: every path is under ``/t/TOKEN/``, a random token
only the base URL (:attr:`ModelServer.url`) carries, so another local user who finds the
port cannot take them (a request without it is answered 404 and its body never read).
Each CLI's base URL keeps its path (Claude Code, Codex, pi and Gemini CLI append theirs).

Bodies are limited to :data:`MAX_BODY_BYTES` (checked from ``Content-Length`` before
reading). A client that goes away mid-stream (an interrupted CLI) ends that response
quietly. Each connection is a thread: a request (its head and body, or the wait for the
next one) must arrive whole within :data:`IDLE_S` (a deadline over the whole request,
not over each read: a byte every 10 s no longer keeps it open), and at most
:data:`MAX_CONNECTIONS` are served at once (one more is answered 503 and closed), so
clients that connect and wait cannot pile up threads without end.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol
from urllib.parse import parse_qs, urlsplit

from tether import jsondepth
from tether.agent.scripted import Reply, load_script

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "Api",
    "Exchange",
    "ModelServer",
    "Script",
    "Step",
    "default_usage",
    "schema_instance",
    "steps",
]

MAX_BODY_BYTES: Final = 64 * 1024 * 1024
KEPT_REQUESTS: Final = 10_000  # entries of ModelServer.requests kept in memory
KEPT_BODY_BYTES: Final = 64 * 1024 * 1024  # their bodies' bytes kept (the newest)
IDLE_S: Final = 30.0
MAX_CONNECTIONS: Final = 128
BUSY_RESPONSE: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n"
)
# Pauses are cut into slices this long, so a server shutting down is not held by them.
PAUSE_SLICE_S: Final = 0.05


class Script:
    """The replies, handed out one per model call (thread-safe)."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = list(replies)
        self.used = 0
        self._lock = threading.Lock()

    @classmethod
    def load(cls, source: str | Path | list[Any]) -> Script:
        """From a script file or a decoded list (raises ``ScriptError`` when malformed)."""
        return cls(load_script(source))

    def used_up(self) -> str:
        return f"the model server's script is used up ({len(self.replies)} replies)"

    def take(self) -> tuple[int, Reply] | None:
        """The next reply and its number (1-based); None when the script is used up."""
        with self._lock:
            if self.used >= len(self.replies):
                return None
            self.used += 1
            return self.used, self.replies[self.used - 1]


class Step(NamedTuple):
    """One step of streaming a reply: ``pause`` (ms), ``thinking`` / ``text`` (a chunk)."""

    kind: str
    value: Any


def steps(reply: Reply) -> Iterator[Step]:
    """A reply's delay, then its thinking and text chunks with ``chunk_ms`` between them."""
    if reply.delay_ms:
        yield Step("pause", reply.delay_ms)
    first = True
    for kind, chunks in (("thinking", reply.thinking), ("text", reply.text)):
        for chunk in chunks:
            if not first and reply.chunk_ms:
                yield Step("pause", reply.chunk_ms)
            first = False
            yield Step(kind, chunk)


_SCALARS: Final[dict[str, Any]] = {
    "string": "scripted",
    "integer": 1,
    "number": 1,
    "boolean": False,
    "array": [],
}


def schema_instance(schema: Any, depth: int = 0) -> Any:
    """A small value matching a JSON schema: the answer to a CLI's structured-output call.

    CLIs make internal calls that ask for JSON (Gemini CLI's model router rates each
    request); the script is for the agent's own turns, so such a call is answered with
    this instead of taking a reply: objects with their required properties, strings
    ``"scripted"``, numbers 1, booleans false, arrays empty, an enum's first value.
    """
    if not isinstance(schema, dict) or depth > 32:
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = required if isinstance(required, list) else list(properties)
        return {
            n: schema_instance(properties.get(n), depth + 1) for n in names if isinstance(n, str)
        }
    return {"string": "scripted", "integer": 1, "number": 1, "boolean": False, "array": []}.get(
        kind
    )


def default_usage(reply: Reply, messages: int) -> tuple[int, int]:
    """(input, output) tokens: the reply's own usage, else the scripted provider's guess."""
    if reply.usage is not None:
        return reply.usage.input, reply.usage.output
    produced = sum(len(c) for c in reply.text + reply.thinking)
    return messages, max(1, (produced + 3) // 4)


class Exchange:
    """One HTTP request and the means to answer it (used from the handler's thread)."""

    def __init__(self, handler: _Handler, body: Any, api: str, path: str) -> None:
        self._handler = handler
        parts = urlsplit(handler.path)
        self.method = handler.command
        self.path = path  # under the token's prefix, without it
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in handler.headers.items()}
        self.body = body
        self.api = api
        self.reply_number: int | None = None
        self.size = 0  # the body's bytes
        self._chunked = False
        self.gone = False

    def take(self, script: Script) -> Reply | None:
        """The next reply of ``script`` for this request (its number goes to the log)."""
        taken = script.take()
        if taken is None:
            return None
        self.reply_number, reply = taken
        return reply

    def send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        handler = self._handler
        with contextlib.suppress(OSError):
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

    def start_sse(self) -> None:
        handler = self._handler
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
        except OSError:
            self.gone = True
        self._chunked = True

    def send_event(self, data: Any, event: str | None = None) -> None:
        """One server-sent event (``data`` as JSON, or a str as-is)."""
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        self._chunk(f"{head}data: {text}\n\n".encode())

    def end_sse(self) -> None:
        if self._chunked:
            self._chunk(b"")
            self._chunked = False

    def pause(self, ms: float) -> None:
        deadline = time.monotonic() + ms / 1000
        while not self.gone and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, PAUSE_SLICE_S))

    def _chunk(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._handler.wfile.flush()
        except OSError:
            self.gone = True  # the client went away (an interrupted CLI)


class Api(Protocol):
    """One provider API: which requests it takes and how it answers them."""

    name: str

    def handles(self, method: str, path: str) -> bool: ...

    def serve(self, exchange: Exchange, script: Script) -> None: ...


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each given only what is left of the request's deadline
    (``handler.deadline``, monotonic; None: no deadline), so a client that trickles a
    byte now and then is cut off when its whole request is overdue."""

    def __init__(self, sock: socket.socket, handler: _Handler) -> None:
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self._handler.deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not read whole in time")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_S  # the whole request's deadline (see _DeadlineReader)
    server: _Server
    deadline: float | None = None

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        super().handle_one_request()

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        return None  # requests go to the request log instead

    def _serve(self) -> None:
        owner = self.server.owner
        path = owner.inside(urlsplit(self.path).path)
        if path is None:  # not under the token: neither its body nor a reply
            self.close_connection = True
            Exchange(self, None, "none", "").send_json(404, {"error": "no API here"})
            return
        body, size = self._body()
        self.deadline = None  # read whole: answering may take the script's pauses
        self.connection.settimeout(self.timeout)  # each write of the answer: IDLE_S at most
        api = next((a for a in owner.apis if a.handles(self.command, path)), None)
        exchange = Exchange(self, body, api.name if api is not None else "none", path)
        exchange.size = size
        try:
            if api is None:
                exchange.send_json(404, {"error": f"no API here for {self.command} {path}"})
            else:
                api.serve(exchange, owner.script)
        finally:
            exchange.end_sse()
            owner.record(exchange)

    def _body(self) -> tuple[Any, int]:
        """The request's JSON body (or what went wrong with it) and its size."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length <= 0:
            return None, 0
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return {"error": f"body of {length} bytes not read (limit {MAX_BODY_BYTES})"}, 0
        data = self.rfile.read(length)
        if len(data) < length:  # the client went away or ran out of time
            self.close_connection = True
        try:
            return jsondepth.loads(data), len(data)
        except (ValueError, RecursionError):
            return {"unparsed": data[:4096].decode("utf-8", "replace")}, len(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ModelServer
    slots: threading.BoundedSemaphore  # at most this many connections served at once

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(BUSY_RESPONSE)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection (a CLI's probe, an interrupt) is normal."""
        import sys

        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class ModelServer:
    """The server; :meth:`start` serves in a thread, :meth:`serve_forever` in this one."""

    def __init__(
        self,
        script: Script,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log: str | Path | None = None,
        apis: Sequence[Api],
        max_connections: int = MAX_CONNECTIONS,
        token: str | None = None,
    ) -> None:
        self.script = script
        self.apis = tuple(apis)
        self.token = token or secrets.token_urlsafe(18)
        self.requests: deque[dict[str, Any]] = deque(maxlen=KEPT_REQUESTS)
        self._count = 0
        self._kept_bytes = 0
        self._log = _open_log(Path(log)) if log is not None else None
        self._lock = threading.Condition()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        self._httpd.slots = threading.BoundedSemaphore(max_connections)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give a CLI: the token is the first part of its path."""
        return f"http://127.0.0.1:{self.port}/t/{self.token}"

    def inside(self, path: str) -> str | None:
        """``path`` without the token's prefix (``/t/TOKEN``); None when it lacks it."""
        parts = path.split("/", 3)  # "", "t", TOKEN, rest
        if len(parts) < 3 or parts[1] != "t":
            return None
        if not hmac.compare_digest(parts[2].encode(), self.token.encode()):
            return None
        return "/" + (parts[3] if len(parts) > 3 else "")

    def record(self, exchange: Exchange) -> None:
        entry: dict[str, Any] = {
            "n": 0,
            "api": exchange.api,
            "method": exchange.method,
            "path": exchange.path,
            "reply": exchange.reply_number,
            "body": exchange.body,
        }
        with self._lock:
            self._count += 1
            entry["n"] = self._count
            if self._log is not None:
                with contextlib.suppress(OSError):
                    os.write(self._log, (json.dumps(entry) + "\n").encode())
            self._keep(entry, exchange.size)
            self._lock.notify_all()

    def _keep(self, entry: dict[str, Any], size: int) -> None:
        """Keep ``entry`` in memory, dropping the oldest bodies beyond the byte budget."""
        if len(self.requests) == self.requests.maxlen:
            self._kept_bytes -= self.requests[0].get("size", 0)
        entry["size"] = size
        self.requests.append(entry)
        self._kept_bytes += size
        for old in self.requests:
            if self._kept_bytes <= KEPT_BODY_BYTES or old is entry:
                break
            if old["size"]:
                self._kept_bytes -= old["size"]
                old["body"], old["size"] = {"dropped": old["size"]}, 0

    def model_requests(self) -> list[dict[str, Any]]:
        """The logged requests that were given a reply of the script."""
        with self._lock:
            return [r for r in self.requests if r["reply"] is not None]

    def wait_request(
        self, matches: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any] | None:
        """The first logged request ``matches`` accepts, waiting up to ``timeout`` seconds
        for it to arrive (woken by each new request); None when none came in time."""

        def found() -> dict[str, Any] | None:
            return next((r for r in self.requests if matches(r)), None)

        with self._lock:
            return self._lock.wait_for(found, timeout)

    def start(self) -> ModelServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="tether-model-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
        if self._log is not None:
            os.close(self._log)
            self._log = None


def _open_log(path: Path) -> int:
    """The request log, appended to, private: created 0600, an existing one of ours
    tightened to 0600 (it holds the prompts, and maybe keys, a CLI sent)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd
