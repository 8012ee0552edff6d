"""Hostile clients of ``tether model-server``: connections that connect and wait.

Before, each connection was a thread with no read timeout and no cap: a client that
connected and sent nothing (or half a head) held its thread for ever, and a loop of such
clients piled up threads without end (500 idle connections: 541 threads).
"""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

import pytest

from tether.modelserver import APIS, ModelServer, Script
from tether.modelserver import core as model_core


def closed_unanswered(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def test_attack_idle_clients_are_closed_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_core._Handler, "timeout", 0.5)
    script = Script.load([{"text": "hi"}])
    server = ModelServer(script, apis=APIS, max_connections=2).start()
    try:
        address = ("127.0.0.1", server.port)
        held = [socket.create_connection(address, timeout=20) for _ in range(2)]
        held[1].sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")  # half a head
        try:
            with socket.create_connection(address, timeout=20) as extra:
                assert extra.recv(65536).startswith(b"HTTP/1.1 503")
            for sock in held:  # each is closed once silent for the idle timeout
                assert closed_unanswered(sock) == b""
        finally:
            for sock in held:
                sock.close()
        # their slots come back (each thread frees its own as it ends): a request is served
        status = 503
        for _ in range(200):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
            try:
                conn.request("GET", "/nothing-here")
                status = conn.getresponse().status
            finally:
                conn.close()
            if status != 503:
                break
        assert status == 404
    finally:
        server.close()


def _post(server: ModelServer, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_attack_the_replies_need_the_token_in_the_base_url() -> None:
    """Another local user who finds the port cannot take the user's scripted replies: a
    request without the base URL's token (or with another) is 404, its body unread, and
    the script untouched."""
    server = ModelServer(Script.load([{"text": "yours"}]), apis=APIS).start()
    try:
        body = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}'
        assert _post(server, "/v1/messages", body)[0] == 404
        assert _post(server, "/t/guess/v1/messages", body)[0] == 404
        assert _post(server, f"/t/{server.token}x/v1/messages", body)[0] == 404
        assert server.script.used == 0
        assert list(server.requests) == []
        path = server.url.removeprefix(f"http://127.0.0.1:{server.port}") + "/v1/messages"
        status, data = _post(server, path, body)
        assert status == 200
        assert b"yours" in data
        logged = server.wait_request(lambda r: True, timeout=30)  # logged once answered
        assert logged is not None
        assert logged["path"] == "/v1/messages"  # without the token
    finally:
        server.close()


def test_attack_a_byte_every_few_seconds_is_cut_off_at_the_requests_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline covers the whole request, not each read: a client trickling a byte
    at a time (each within the old per-read timeout) is closed once its request is due."""
    monkeypatch.setattr(model_core._Handler, "timeout", 1.0)
    server = ModelServer(Script.load([{"text": "hi"}]), apis=APIS).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            sock.sendall(f"POST /t/{server.token}/v1/messages HTTP/1.1\r\n".encode())
            sock.settimeout(0.4)  # the trickle's pace: each byte well inside the timeout
            closed = False
            for _ in range(150):  # a hang guard (60 s), not a verdict
                try:
                    sock.sendall(b"X")
                    closed = sock.recv(65536) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                if closed:
                    break
            assert closed
    finally:
        server.close()


def test_attack_request_bodies_are_not_kept_for_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    """12 POSTs of 16 MiB grew the server by their size; now only the newest bodies up to
    a byte budget stay in memory (the older ones keep their size), and at most a number
    of entries."""
    monkeypatch.setattr(model_core, "KEPT_BODY_BYTES", 3 << 20)
    monkeypatch.setattr(model_core, "KEPT_REQUESTS", 4)
    server = ModelServer(Script.load([]), apis=APIS).start()
    try:
        big = b'{"pad":"' + b"a" * (1 << 20) + b'"}'
        path = f"/t/{server.token}/v1/messages"
        for _ in range(6):
            _post(server, path, big)  # answered 400 (no messages): only its memory counts
        assert server.wait_request(lambda r: r["n"] == 6, timeout=30)  # logged once answered
        kept = list(server.requests)
        assert [e["n"] for e in kept] == [3, 4, 5, 6]
        bodies = [e["body"] for e in kept]
        assert bodies[0] == {"dropped": len(big)}
        assert all(isinstance(b, dict) and "pad" in b for b in bodies[-2:])
        assert sum(len(b.get("pad", "")) for b in bodies) <= 3 << 20
    finally:
        server.close()


def test_attack_the_request_log_is_private(tmp_path: Path) -> None:
    """It holds the prompts (and maybe the keys) a CLI sent: 0600, an old one tightened."""
    fresh, old = tmp_path / "fresh.jsonl", tmp_path / "old.jsonl"
    old.write_text("")
    old.chmod(0o644)
    for log in (fresh, old):
        ModelServer(Script.load([]), apis=APIS, log=log).close()
        assert log.stat().st_mode & 0o777 == 0o600
