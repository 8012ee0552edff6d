"""Hostile clients of ``tether model-server``: connections that connect and wait.

Before, each connection was a thread with no read timeout and no cap: a client that
connected and sent nothing (or half a head) held its thread for ever, and a loop of such
clients piled up threads without end (500 idle connections: 541 threads).
"""

from __future__ import annotations

import http.client
import socket

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
