"""A WebSocket client written by hand over a raw socket, for the ``agent.drive`` tests.

It is the test's own, independent reading of RFC 6455 (handshake, masked client frames,
unmasked server frames with 7/16/64-bit lengths), so the daemon's wsproto side is checked
against something that shares no code with it. Blocking, with the socket's own timeout as
the only bound: every read waits for an event (a frame), never for a time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from tests.support.daemon import call

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10


@dataclass
class RawWs:
    sock: socket.socket
    output: bytearray = field(default_factory=bytearray)
    texts: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None

    # -- opening -------------------------------------------------------------------

    @classmethod
    def drive(cls, sock: socket.socket, name: str) -> tuple[RawWs, dict[str, Any]]:
        reply = call(sock, 1, "agent.drive", {"name": name})
        assert "result" in reply, reply
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET /agent/{name} HTTP/1.1\r\nHost: tether\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)
            assert chunk, f"EOF during the handshake: {head!r}"
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest())
        assert b"sec-websocket-accept: " + accept.lower() in head.lower(), head
        result: dict[str, Any] = reply["result"]  # type: ignore[assignment]
        return cls(sock), result

    # -- frames --------------------------------------------------------------------

    def send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        size = len(payload)
        if size < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
        elif size < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def type(self, text: str) -> None:
        self.send(BINARY, text.encode())

    def control(self, **message: Any) -> None:
        self.send(TEXT, json.dumps(message).encode())

    def read_frame(self) -> tuple[int, bytes]:
        first, second = self._exactly(2)
        assert not second & 0x80, "server frames are never masked"
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", self._exactly(2))
        elif size == 127:
            (size,) = struct.unpack("!Q", self._exactly(8))
        payload = self._exactly(size)
        opcode = first & 0x0F
        if opcode == BINARY:
            self.output += payload
        elif opcode == TEXT:
            self.texts.append(json.loads(payload))
        elif opcode == CLOSE:
            self.close_code = struct.unpack("!H", payload[:2])[0] if payload else 1005
        return opcode, payload

    def read_until_output(self, needle: bytes) -> bytes:
        """Frames until the output so far holds ``needle``; returns that output."""
        while needle not in self.output:
            opcode, _ = self.read_frame()
            assert opcode != CLOSE, f"closed before {needle!r}: {bytes(self.output)!r}"
        return bytes(self.output)

    def read_until_text(self, kind: str) -> dict[str, Any]:
        while True:
            for message in self.texts:
                if message.get("type") == kind:
                    self.texts.remove(message)
                    return message
            opcode, _ = self.read_frame()
            assert opcode != CLOSE or any(m.get("type") == kind for m in self.texts), self.texts

    def read_until_close(self) -> int:
        while self.close_code is None:
            self.read_frame()
        return self.close_code

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "EOF inside a WebSocket frame"
            data += chunk
        return data
