"""What a PTY agent's holder and the daemon say to each other, sans-IO, and the output ring.

Theory of operation: a PTY agent's pseudo-terminal is held by a small holder process
(:mod:`tether.daemon.pty.holder`) that outlives the daemon. The two talk over a private
Unix socket with the daemon protocol's u32 length-prefixed frames
(:func:`~tether.daemon.rpc.protocol.encode_frame`,
:class:`~tether.daemon.rpc.protocol.FrameDecoder`);
a frame's first byte says what it carries, the rest is the payload:

==== ============== ================================================================
kind direction      payload
==== ============== ================================================================
H    holder->daemon hello, JSON ``{pid, cols, rows}`` (the first frame on a connection)
R    holder->daemon the output ring's content (second frame: what a late viewer sees)
O    holder->daemon program output, as read from the PTY master
X    holder->daemon the program ended, JSON ``{code, signal}`` (then the holder exits)
I    daemon->holder keystrokes for the program
W    daemon->holder resize, JSON ``{cols, rows}``
K    daemon->holder stop: hang up the program's process group, JSON ``{grace_s}``
==== ============== ================================================================

:class:`OutputRing` keeps the last ``RING_BYTES`` of output (the oldest bytes are
dropped, and the cut moves to the next line start when one is near so the replay starts
clean). Both sides keep one: the holder's survives a daemon restart, the daemon's serves
viewers without a round trip.

Decoding is total: :func:`decode_holder_frame` returns a :class:`HolderFrame` or a
:class:`HolderRejection` string, never raises.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Any, Final

import msgspec

from tether import jsondepth
from tether.daemon.fleet.replies import PTY_MAX_SIZE, PTY_MIN_SIZE
from tether.daemon.rpc.protocol import encode_frame

RING_BYTES: Final = 1_048_576
"""Output kept for late viewers (1 MiB)."""
MAX_HOLDER_FRAME: Final = RING_BYTES + 1024
"""The largest frame either side accepts (a whole ring plus its kind byte)."""
CHUNK_BYTES: Final = 65536
"""The most the holder reads from the PTY (or a viewer's input is cut to) at once."""
MIN_SIZE: Final = PTY_MIN_SIZE
MAX_SIZE: Final = PTY_MAX_SIZE
"""Columns and rows are 1..1000."""
_LINE_SEEK: Final = 4096  # how far past the cut the ring looks for a line start

SOCKET_NAME: Final = "pty.sock"
EXIT_NAME: Final = "pty-exit.json"

Size = Annotated[int, msgspec.Meta(ge=MIN_SIZE, le=MAX_SIZE)]


class Kind(bytes, enum.Enum):
    HELLO = b"H"
    RING = b"R"
    OUTPUT = b"O"
    EXIT = b"X"
    INPUT = b"I"
    RESIZE = b"W"
    STOP = b"K"


class Hello(msgspec.Struct, frozen=True):
    pid: int
    cols: Size
    rows: Size


class Resize(msgspec.Struct, frozen=True):
    cols: Size
    rows: Size


class ExitInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    code: int | None = None
    signal: int | None = None

    @property
    def status(self) -> str:
        """The agent's end state: ``done`` for exit 0, else ``failed``."""
        return "done" if self.code == 0 else "failed"

    def describe(self) -> str:
        if self.signal is not None:
            return f"the program was killed by signal {self.signal}"
        return f"the program exited with code {self.code}"


class Stop(msgspec.Struct, frozen=True):
    grace_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 2.0


@dataclass(frozen=True, slots=True)
class HolderFrame:
    kind: Kind
    payload: bytes


class HolderRejection(str):
    """Why a frame was refused (a value, not an exception)."""


_JSON_KINDS: Final[dict[Kind, type[Any]]] = {
    Kind.HELLO: Hello,
    Kind.EXIT: ExitInfo,
    Kind.RESIZE: Resize,
    Kind.STOP: Stop,
}
_DECODERS: Final = {kind: msgspec.json.Decoder(cls) for kind, cls in _JSON_KINDS.items()}
_ENCODER: Final = msgspec.json.Encoder()


def encode(kind: Kind, payload: bytes | msgspec.Struct = b"") -> bytes:
    """One whole frame of ``kind`` (a Struct payload is sent as JSON)."""
    body = payload if isinstance(payload, bytes) else _ENCODER.encode(payload)
    return encode_frame(kind.value + body)


def decode_holder_frame(body: bytes) -> HolderFrame | HolderRejection:
    if not body:
        return HolderRejection("empty frame")
    try:
        kind = Kind(body[:1])
    except ValueError:
        return HolderRejection(f"unknown frame kind {body[:1]!r}")
    return HolderFrame(kind, body[1:])


def decode_json(frame: HolderFrame) -> Any:
    """The typed payload of a JSON frame (Hello, ExitInfo, Resize, Stop) or a HolderRejection."""
    decoder = _DECODERS.get(frame.kind)
    if decoder is None:
        return HolderRejection(f"frame {frame.kind.name} carries no JSON")
    try:
        return jsondepth.decode(decoder, frame.payload)
    except msgspec.DecodeError as exc:
        return HolderRejection(f"bad {frame.kind.name} payload: {exc}")


class OutputRing:
    """The last ``limit`` bytes of a program's output."""

    __slots__ = ("_buf", "_limit", "dropped")

    def __init__(self, limit: int = RING_BYTES) -> None:
        self._buf = bytearray()
        self._limit = limit
        self.dropped = 0  # bytes dropped from the front so far

    def __len__(self) -> int:
        return len(self._buf)

    def append(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        over = len(buf) - self._limit
        if over > 0:
            newline = buf.find(b"\n", over, over + _LINE_SEEK)
            cut = over if newline < 0 else newline + 1
            del buf[:cut]
            self.dropped += cut

    def replace(self, data: bytes) -> None:
        self._buf = bytearray()
        self.append(data)

    def content(self) -> bytes:
        return bytes(self._buf)


def check_size(cols: Any, rows: Any) -> tuple[int, int] | HolderRejection:
    """``(cols, rows)`` when both are ints in 1..1000, else a HolderRejection."""
    for value in (cols, rows):
        if type(value) is not int or not MIN_SIZE <= value <= MAX_SIZE:
            return HolderRejection(f"cols and rows must be integers in {MIN_SIZE}..{MAX_SIZE}")
    return cols, rows


__all__ = [
    "CHUNK_BYTES",
    "EXIT_NAME",
    "MAX_HOLDER_FRAME",
    "RING_BYTES",
    "SOCKET_NAME",
    "ExitInfo",
    "Hello",
    "HolderFrame",
    "HolderRejection",
    "Kind",
    "OutputRing",
    "Resize",
    "Stop",
    "check_size",
    "decode_holder_frame",
    "decode_json",
    "encode",
]
