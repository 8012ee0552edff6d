"""The dashboard: a web page and its JSON API, a client of the daemon socket.

Routes (every one behind :class:`~tether.web.security.Policy`):

- ``GET /`` the page; ``GET /static/NAME`` its script, styles and the vendored xterm.js;
- ``GET /api/agents`` every agent's status (with its last event and unanswered
  questions); ``GET /api/agents/NAME`` one; ``GET /api/agents/NAME/inbox`` its inbox
  messages with their answers; ``GET /api/agents/NAME/diff`` the changes in its worktree
  (``agent.diff``; the page shows them under a selected agent that has one);
  ``GET /api/agents/NAME/queue`` its queued steers and follow-ups (``agent.queue``);
- ``POST /api/agents/NAME/ACTION`` for ``steer``, ``follow_up``, ``finalize``, ``cancel``,
  ``stop``, ``answer`` and ``unqueue`` (a JSON body: ``{text}``, ``{note}``, ``{mode}``,
  ``{key, text, decision, scope}``, ``{ref}``): the daemon's answer, or ``{error, code}``
  with status 400/404/409/503;
- WebSocket ``/api/agents/NAME/events``: the agent's events from seq 1, then live, each as
  ``{type: "event", seq, kind, html}`` where ``html`` is what the terminal display draws
  for it (:mod:`tether.display.html`), then ``{type: "end", state}``;
- WebSocket ``/api/agents/NAME/drive``: a PTY agent's terminal, relayed to and from the
  daemon's ``agent.drive`` (binary = PTY bytes, text = JSON controls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import jsondepth
from tether.daemon.fleet.replies import AgentStatus, ListReply, decode_reply
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonCallError, DaemonClientError
from tether.daemon.rpc.protocol import ErrorCode, Request
from tether.transports.ws import CLOSE_POLICY, WsBinary, WsClosed, WsText
from tether.web.http import Request as HttpRequest
from tether.web.http import Response, ServerSocket, drain
from tether.web.security import Policy

log = logging.getLogger("tether.web")

ACTIONS: Final = {"steer", "follow_up", "finalize", "cancel", "stop", "answer", "unqueue"}
STATIC: Final = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "xterm.js": "text/javascript; charset=utf-8",
    "xterm.css": "text/css; charset=utf-8",
    "addon-fit.js": "text/javascript; charset=utf-8",
}
_STATUS_OF: Final = {
    ErrorCode.AGENT_NOT_FOUND: 404,
    ErrorCode.INVALID_STATUS: 409,
    ErrorCode.INVALID_PARAMS: 400,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.BUSY: 503,
}
INBOX_LIMIT: Final = 200
INBOX_CHARS: Final = 8192  # of a message's text shown (longer: cut, `cut` its length)


def _static(name: str) -> bytes:
    return resources.files("tether.web").joinpath("static", name).read_bytes()


class Dashboard:
    """The application; see the module docstring."""

    def __init__(self, socket_path: Path, policy: Policy, db: Path | None = None) -> None:
        self.socket_path = socket_path
        self.policy = policy
        self.db = db
        self._client: AsyncDaemonClient | None = None
        self._last: dict[str, tuple[int, dict[str, Any]]] = {}  # name -> (seq, last event)

    # -- the gate ---------------------------------------------------------------------

    def gate(self, request: HttpRequest) -> Response | None:
        refusal = self.policy.check(request.query, request.headers)
        return None if refusal is None else Response.error(refusal.status, refusal.reason)

    # -- plain requests -----------------------------------------------------------------

    async def handle(self, request: HttpRequest) -> Response:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "GET" and not parts:
            return self._index()
        if request.method == "GET" and len(parts) == 2 and parts[0] == "static":
            return self._file(parts[1])
        if parts[:2] != ["api", "agents"]:
            return Response.error(404, "no such page")
        try:
            return await self._api(request, parts[2:])
        except DaemonCallError as exc:
            status = _STATUS_OF.get(exc.code, 500)
            return Response.json({"error": exc.message, "code": exc.code.value}, status)
        except DaemonClientError as exc:
            self._client = None
            return Response.json({"error": str(exc), "code": "daemon_unavailable"}, 503)

    def _index(self) -> Response:
        page = _static("index.html").decode().replace("{{TOKEN}}", self.policy.token)
        csp = (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self' "
            + " ".join(f"ws://{h}" for h in sorted(self.policy.hosts))
            + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        headers = [("content-security-policy", csp)]
        return Response(200, page.encode(), "text/html; charset=utf-8", headers)

    def _file(self, name: str) -> Response:
        kind = STATIC.get(name)
        if kind is None:
            return Response.error(404, "no such file")
        return Response(200, _static(name), kind)

    async def _api(self, request: HttpRequest, rest: list[str]) -> Response:
        if request.method == "GET" and not rest:
            return Response.json(await self.agents())
        if request.method == "GET" and len(rest) == 1:
            return Response.json(await self.call("agent.status", {"name": rest[0]}))
        if request.method == "GET" and len(rest) == 2 and rest[1] == "inbox":
            return Response.json(await self.inbox(rest[0]))
        if request.method == "GET" and len(rest) == 2 and rest[1] == "queue":
            return Response.json(await self.call("agent.queue", {"name": rest[0]}))
        if request.method == "GET" and len(rest) == 2 and rest[1] == "diff":
            return Response.json(await self.call("agent.diff", {"name": rest[0]}))
        if request.method == "POST" and len(rest) == 2 and rest[1] in ACTIONS:
            body = request.json()
            if not isinstance(body, dict):
                return Response.error(400, "the body must be a JSON object")
            return Response.json(await self.act(rest[0], rest[1], body))
        return Response.error(404, "no such API")

    # -- the daemon -----------------------------------------------------------------------

    async def call(self, method: str, params: Any = None) -> Any:
        if self._client is None or self._client.closed:
            self._client = await AsyncDaemonClient.open(self.socket_path)
        try:
            return await self._client.call(method, params)
        except DaemonCallError:
            raise
        except DaemonClientError:
            self._client = None
            raise

    async def agents(self) -> dict[str, Any]:
        listed = decode_reply(await self.call("agent.list"), ListReply)
        rows = []
        for agent in listed.agents:
            row = msgspec.to_builtins(agent)
            row["last_event"] = await self._last_event(agent)
            rows.append(row)
        return {"agents": rows}

    async def _last_event(self, agent: AgentStatus) -> dict[str, Any] | None:
        seq = agent.last_seq
        if agent.kind == "pty" or seq < 1:
            return None
        cached = self._last.get(agent.name)
        if cached is not None and cached[0] == seq:
            return cached[1]
        # event `seq` itself: the run goes on meanwhile, and the newest event by the time
        # this answers would not be the one the row's last_seq names (seen: 5 beside 3)
        params = {"name": agent.name, "after_seq": seq - 1, "limit": 1}
        events = (await self.call("agent.events", params)).get("events") or []
        last = _summary(events[0]) if events else None
        if last is not None:
            self._last[agent.name] = (seq, last)
        return last

    async def act(self, name: str, action: str, body: dict[str, Any]) -> Any:
        params: dict[str, Any] = {"name": name}
        for key in ("text", "note", "mode", "key", "decision", "scope"):
            if isinstance(body.get(key), str) and body[key]:
                params[key] = body[key]
        if action == "answer" and "text" not in params:
            params["text"] = ""
        if action == "unqueue" and isinstance(body.get("ref"), int):
            params["ref"] = body["ref"]
        return await self.call(f"agent.{action}", params)

    async def inbox(self, name: str) -> dict[str, Any]:
        status = decode_reply(await self.call("agent.status", {"name": name}), AgentStatus)
        if status.kind == "pty":
            return {"name": name, "messages": []}
        messages = await asyncio.to_thread(_read_inbox, self.db, status.run_id)
        return {"name": name, "messages": messages}

    # -- WebSockets -----------------------------------------------------------------------

    async def websocket(self, request: HttpRequest, socket: ServerSocket) -> None:
        parts = [p for p in request.path.split("/") if p]
        if len(parts) != 4 or parts[:2] != ["api", "agents"]:
            await socket.close(CLOSE_POLICY, "no such socket")
            return
        name, kind = parts[2], parts[3]
        try:
            if kind == "events":
                await _events(self.socket_path, name, socket)
            elif kind == "drive":
                await _drive(self.socket_path, name, socket)
            else:
                await socket.close(CLOSE_POLICY, "no such socket")
        except DaemonClientError as exc:
            with contextlib.suppress(ConnectionError):
                await socket.send_text(json.dumps({"type": "error", "message": str(exc)}))
                await socket.close(CLOSE_POLICY, "daemon error")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def _summary(event: dict[str, Any]) -> dict[str, Any]:
    kind = str(event.get("type", "?"))
    text = event.get("text") or event.get("name") or event.get("status") or ""
    return {"seq": event.get("seq"), "type": kind, "text": str(text)[:120], "ts": event.get("ts")}


def _read_inbox(db: Path | None, run_id: str) -> list[dict[str, Any]]:
    from tether.inbox.store import open_store

    with open_store(db) as store:
        answers = store.answers(run_id)
        rows = store.recent(run_id, limit=INBOX_LIMIT, max_chars=INBOX_CHARS)
    out = []
    for row in rows:
        item = jsondepth.loads(row.to_json())
        item["answer"] = answers.get(row.msg_key)
        out.append(item)
    return out


async def _events(socket_path: Path, name: str, socket: ServerSocket) -> None:
    """Stream one agent's events, rendered, until it ends or the browser goes."""
    from tether.display.html import open_html_display
    from tether.wire import Rejection, decode_event

    display, sink = open_html_display(width=100)
    client = await AsyncDaemonClient.open(socket_path)

    async def on_request(request: Request) -> Any:
        if request.method != "agent.event" or not isinstance(request.params, dict):
            raise DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"no {request.method} here")
        for raw in request.params.get("events", []):
            line = json.dumps(raw).encode()
            event = decode_event(line)
            if not isinstance(event, Rejection):
                display.event(event, run=event.run, raw=line)
            message = {"type": "event", "seq": raw.get("seq"), "kind": raw.get("type")}
            await socket.send_text(json.dumps({**message, "html": sink.take()}))
        await drain(socket.writer)  # a browser that does not read is let go
        return {}

    client.on_request = on_request
    params = {"name": name, "after_seq": 0, "follow": True}
    stream = asyncio.ensure_future(client.call("agent.events", params))
    watch = asyncio.ensure_future(_until_closed(socket))
    try:
        done, _ = await asyncio.wait({stream, watch}, return_when=asyncio.FIRST_COMPLETED)
        if stream in done:
            result = stream.result()
            await socket.send_text(json.dumps({"type": "end", "state": result.get("state")}))
            await socket.close()
    finally:
        for task in (stream, watch):
            task.cancel()
        await client.close()


async def _until_closed(socket: ServerSocket) -> None:
    while True:
        events = await socket.receive()
        if not events or any(isinstance(e, WsClosed) for e in events):
            return


async def _drive(socket_path: Path, name: str, socket: ServerSocket) -> None:
    """Relay a browser terminal to the daemon's ``agent.drive`` and back."""
    from tether.daemon.pty.drive_client import open_drive_async

    drive = await open_drive_async(socket_path, name)

    async def upstream() -> None:  # browser -> daemon
        while True:
            events = await socket.receive()
            if not events:
                return
            for event in events:
                if isinstance(event, WsBinary):
                    drive.send_binary(event.data)
                elif isinstance(event, WsText):
                    drive.send_text(event.text)
                elif isinstance(event, WsClosed):
                    return
            await drive.writer.drain()

    async def downstream() -> None:  # daemon -> browser
        while True:
            events = await drive.receive()
            if not events:
                return
            for event in events:
                if isinstance(event, WsBinary):
                    await socket.send_binary(event.data)
                elif isinstance(event, WsText):
                    await socket.send_text(event.text)
                elif isinstance(event, WsClosed):
                    await socket.close(event.code, event.reason)
                    return

    tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        drive.close()


__all__ = ["Dashboard"]
