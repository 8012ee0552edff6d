"""``tether dashboard`` over plain HTTP and WebSockets: the JSON API the page uses, and the
token, Host and Origin checks (no browser here; see test_dashboard_browser.py)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import AgentDaemon, agentd
from tests.support.dashboard import DashboardProcess, dashboard, start_dashboard

from tether.web.security import Policy, allowed_hosts

__all__ = ["agentd", "dashboard"]


def request(
    dash: DashboardProcess,
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", dash.port, timeout=30)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def token(dash: DashboardProcess) -> dict[str, str]:
    return {"X-Tether-Token": dash.token}


def test_policy_checks_host_origin_and_token() -> None:
    policy = Policy("s3cret", allowed_hosts(8000))
    ok = {"host": "127.0.0.1:8000", "x-tether-token": "s3cret"}
    assert policy.check("", ok) is None
    assert policy.check("token=s3cret", {"host": "localhost:8000"}) is None
    assert policy.check("", {"host": "[::1]:8000", "authorization": "Bearer s3cret"}) is None
    assert policy.check("", {**ok, "origin": "http://127.0.0.1:8000"}) is None
    refused = {
        "no token": ("", {"host": "127.0.0.1:8000"}),
        "bad token": ("token=nope", {"host": "127.0.0.1:8000"}),
        "rebinding": ("", {**ok, "host": "evil.example:8000"}),
        "other port": ("", {**ok, "host": "127.0.0.1:8001"}),
        "foreign origin": ("", {**ok, "origin": "http://evil.example"}),
        "cross-site fetch": ("", {**ok, "sec-fetch-site": "cross-site"}),
    }
    for name, (query, headers) in refused.items():
        refusal = policy.check(query, headers)
        assert refusal is not None, name
        assert refusal.status == (401 if "token" in name else 403), name
    assert "0.0.0.0:8000" in allowed_hosts(8000, "0.0.0.0")


def test_api_serves_the_page_agents_and_controls(
    agentd: AgentDaemon, dashboard: DashboardProcess
) -> None:
    agentd.spawn("w", [{"text": "first"}, {"text": "steered"}], task="go")
    agentd.wait_for("w", lambda s: s["state"] == "ready")
    status, headers, page = request(dashboard, "GET", f"/?token={dashboard.token}")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    assert dashboard.token.encode() in page
    status, _, script = request(dashboard, "GET", f"/static/xterm.js?token={dashboard.token}")
    assert status == 200
    assert b"Terminal" in script

    status, _, body = request(dashboard, "GET", "/api/agents", headers=token(dashboard))
    assert status == 200
    [agent] = json.loads(body)["agents"]
    assert agent["name"] == "w"
    assert agent["last_event"]["seq"] == agent["last_seq"]
    status, _, body = request(
        dashboard, "POST", "/api/agents/w/steer", body={"text": "more"}, headers=token(dashboard)
    )
    assert status == 200, body
    assert json.loads(body)["ack"] == "accepted"
    status, _, body = request(dashboard, "GET", "/api/agents/ghost", headers=token(dashboard))
    assert status == 404
    assert json.loads(body)["code"] == "agent_not_found"
    status, _, body = request(dashboard, "GET", "/api/agents/w/inbox", headers=token(dashboard))
    assert (status, json.loads(body)["messages"]) == (200, [])


def test_requests_without_token_or_from_elsewhere_are_refused(
    agentd: AgentDaemon, dashboard: DashboardProcess
) -> None:
    good = token(dashboard)
    assert request(dashboard, "GET", "/")[0] == 401
    assert request(dashboard, "GET", "/api/agents")[0] == 401
    assert request(dashboard, "GET", "/static/app.js")[0] == 401
    assert request(dashboard, "GET", "/?token=wrong")[0] == 401
    rebinding = {**good, "Host": f"evil.example:{dashboard.port}"}
    assert request(dashboard, "GET", "/api/agents", headers=rebinding)[0] == 403
    foreign = {**good, "Origin": "http://evil.example"}
    assert request(dashboard, "GET", "/api/agents", headers=foreign)[0] == 403
    assert request(dashboard, "POST", "/api/agents/x/cancel", body={}, headers=foreign)[0] == 403


def test_websockets_need_the_token_and_our_origin(
    agentd: AgentDaemon, dashboard: DashboardProcess
) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    agentd.spawn("e", [{"text": "hello from e"}], task="go")
    agentd.wait_for("e", lambda s: s["state"] == "ready")
    url = f"ws://127.0.0.1:{dashboard.port}/api/agents/e/events"
    origin = f"http://127.0.0.1:{dashboard.port}"
    for bad_url, bad_origin, status in (
        (url, origin, 401),
        (f"{url}?token={dashboard.token}", "http://evil.example", 403),
    ):
        with pytest.raises(InvalidStatus) as info:
            connect(bad_url, origin=bad_origin, open_timeout=20)  # type: ignore[arg-type]
        assert info.value.response.status_code == status
    with connect(f"{url}?token={dashboard.token}", origin=origin, open_timeout=20) as ws:  # type: ignore[arg-type]
        html = ""
        while "hello from e" not in html:
            message = json.loads(ws.recv(timeout=20))
            assert message["type"] == "event"
            html += message["html"]
    assert "<span" in html  # drawn by the display's HTML sink


def test_oversized_requests_are_refused(agentd: AgentDaemon, dashboard: DashboardProcess) -> None:
    import contextlib
    import socket

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", dashboard.port), timeout=30) as sock:
            sock.sendall(data)
            reply = b""
            with contextlib.suppress(ConnectionResetError):  # refused mid-body
                while chunk := sock.recv(65536):
                    reply += chunk
            return reply

    host = (
        f"Host: 127.0.0.1:{dashboard.port}\r\nX-Tether-Token: {dashboard.token}\r\n"
        "Connection: close\r\n"
    )
    for big_header in (20_000, 100 * 1024):  # parsed whole, or over h11's buffer
        header = f"X-Big: {'a' * big_header}\r\n"
        head = raw(f"GET /api/agents HTTP/1.1\r\n{host}{header}\r\n".encode())
        assert head.startswith(b"HTTP/1.1 431"), (big_header, head[:40])
    size = 300_000
    big = f"POST /api/agents/x/steer HTTP/1.1\r\n{host}Content-Length: {size}\r\n\r\n".encode()
    assert raw(big + b"{" * size).startswith(b"HTTP/1.1 413")


def test_connections_over_the_cap_are_answered_503(agentd: AgentDaemon) -> None:
    import contextlib
    import socket

    from websockets.sync.client import connect

    agentd.spawn("held", [{"text": "hi"}], task="go")
    agentd.wait_for("held", lambda s: s["state"] == "ready")
    with start_dashboard(agentd, "--max-connections", "3") as dash:
        url = f"ws://127.0.0.1:{dash.port}/api/agents/held/events?token={dash.token}"
        origin = f"http://127.0.0.1:{dash.port}"
        with contextlib.ExitStack() as stack:
            for _ in range(3):  # each socket open and streaming: every slot is busy
                ws = stack.enter_context(connect(url, origin=origin, open_timeout=20))  # type: ignore[arg-type]
                assert ws.recv(timeout=20)
            with socket.create_connection(("127.0.0.1", dash.port), timeout=30) as extra:
                reply = extra.recv(65536)
            assert reply.startswith(b"HTTP/1.1 503"), reply
            assert reply.endswith(b"too many connections\n")
        # the held connections end; their slots come back (the server sees each close)
        status = 503
        for _ in range(200):
            status, _, _ = request(dash, "GET", "/api/agents", headers=token(dash))
            if status != 503:
                break
        assert status == 200


def test_the_diff_of_an_agent_with_a_worktree(
    agentd: AgentDaemon, dashboard: DashboardProcess, tmp_path: Path
) -> None:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "0")):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=me", "-c", "user.email=me@x", *args],
            check=True,
        )
    write = {"name": "write", "arguments": {"path": "new.txt", "content": "made by d\n"}}
    replies = [{"text": "writing", "tool_calls": [write]}, {"text": "written"}]
    agentd.spawn("d", replies, task="go", cwd=str(repo), worktree=True)
    agentd.wait_for("d", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    status, _, body = request(dashboard, "GET", "/api/agents/d/diff", headers=token(dashboard))
    assert status == 200, body
    diff = json.loads(body)
    assert (diff["branch"], diff["base"], diff["files"]) == ("tether/d", "main", ["new.txt"])
    assert "+made by d" in diff["text"]
    agentd.spawn("plain", [{"text": "hi"}], task="go")
    status, _, body = request(dashboard, "GET", "/api/agents/plain/diff", headers=token(dashboard))
    assert status == 409, body
    assert json.loads(body)["code"] == "invalid_status"
