"""RESP-like frames: bash-agent's internal message protocol, sans-IO.

Theory of operation
-------------------
A frame is ``*<N>\\r\\n`` followed by N fields, each ``$<byte length>\\r\\n<bytes>\\r\\n``.
Fields are binary safe (no escaping; CR, LF and NUL are ordinary data), ``$0\\r\\n\\r\\n`` is
an empty field, and field 0 is the message type (see :mod:`tether.framing.messages`). Numbers
are plain decimals: no sign, no leading zeros, at most :data:`MAX_LENGTH_DIGITS` digits.
Only arrays of bulk strings are frames; any other RESP type (``+``, ``-``, ``:``, nested
arrays, nulls such as ``*-1`` / ``$-1``, RESP3 types) is malformed. ``*0\\r\\n`` is a valid,
empty frame; the message layer rejects it.

A reader is fed bytes with :meth:`PureReader.feed` and asked for the next result with
:meth:`PureReader.next`, which returns one of:

- a frame: ``tuple[bytes, ...]``;
- a :class:`FrameRejection` (``code``, ``reason``, ``offset`` = stream offset of the bad frame);
- :data:`NEED_DATA`: feed more bytes first.

It owns no file, socket, thread or clock. Call ``next()`` after every ``feed()`` until it
returns ``NEED_DATA``: limits are checked there, so a caller that only feeds buffers bytes.
When the stream ends, :meth:`PureReader.eof` reports a frame cut short.

Limits (constructor parameters; checked as soon as a length header is read, before any of
the field's bytes are waited for, so a hostile header never makes the reader buffer)
-----------------------------------------------------------------------------------------
- ``max_fields`` (default :data:`DEFAULT_MAX_FIELDS`): ``*N`` with N above it is
  ``too-many-fields``.
- ``max_field_bytes`` (default :data:`DEFAULT_MAX_FIELD_BYTES`, 16 MiB, the inbox's cap): a
  ``$L`` with L above it is ``field-too-large``.
- ``max_frame_bytes`` (default :data:`DEFAULT_MAX_FRAME_BYTES`): when the declared frame
  (headers included) grows past it, ``frame-too-large``.
- a header line longer than ``1 + MAX_LENGTH_DIGITS + 2`` bytes is ``malformed``.

FrameRejection codes (:class:`FrameCode`): ``malformed``, ``too-many-fields``, ``field-too-large``,
``frame-too-large``, and ``truncated`` (only from ``eof()``). The reason names the field
(0-based, field 0 is the type) and the limit.

Resync rule
-----------
After a rejection the reader skips to the next ``*`` at the start of a line (a ``*`` right
after ``\\n``), searching from the byte where the error was found, and never accepting the
rejected frame's own first byte. Skipped bytes are counted in :meth:`PureReader.statistics`.
A nested ``*`` header at a field position is at a line start, so ``*2\\r\\n*1\\r\\n...``
yields a rejection and then the inner frame. Data inside a rejected frame that happens to
contain ``\\n*`` can yield further rejections: by design the reader trusts no length from a
frame it refused.
Nothing is skipped silently: any byte between frames that is not a frame start (a stray
newline too) is rejected first.

Two readers share one contract and one test suite: :class:`PureReader` (pure Python) and
:class:`~tether.framing.resp_hiredis.HiredisReader` (``hiredis.Reader`` as the fast path;
every frame it returns is checked against the exact bytes and the limits, and anything else
falls back to the pure parser, so results, rejections and resync points are identical).
:func:`tether.framing.resp_hiredis.open_reader` picks hiredis when it is installed (the
``fast`` extra).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias

from tether.wire.needdata import NEED_DATA, NeedData

# Largest number of fields one frame may declare. bash-agent's widest message is TOOL_CALL
# with its flattened input members; 1024 leaves room for 510 of them.
DEFAULT_MAX_FIELDS: Final = 1024
# Largest field, in bytes: 16 MiB, the inbox's cap on one message (OpenOPC's relative).
DEFAULT_MAX_FIELD_BYTES: Final = 16 * 1024 * 1024
# Largest whole frame, headers included. Keeps 1024 fields of 16 MiB from adding up to 16 GiB.
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
# A count or length has at most this many digits (2**64 has 20); longer headers are malformed.
MAX_LENGTH_DIGITS: Final = 20
# Longest header line: the type byte, the digits, CRLF.
_HEADER_SPAN: Final = 1 + MAX_LENGTH_DIGITS + 2
# A bytearray buffer is compacted at a frame boundary once this many bytes are consumed.
_COMPACT_AT: Final = 64 * 1024
# While the unread rest is at most this (or at most the new chunk), feed() rebuilds an
# immutable buffer, whose slices are the fields with one copy; otherwise it appends in place.
_REBUILD_AT_MOST: Final = 4096
# The hiredis-backed reader hands hiredis at most this many bytes beyond what it has parsed.
_HIREDIS_SLICE: Final = 64 * 1024
# Above this many payload bytes per batch, hiredis replies are checked in place, not re-encoded.
_COPY_AT_MOST: Final = 16 * 1024

# Results one next() call parses ahead (and hiredis replies verified together).
_BATCH: Final = 128
# Counts and lengths below this have their header in a look-up table.
_TABLE_SIZE: Final = 1000

_STAR: Final = 42  # b"*"
_DOLLAR: Final = 36  # b"$"
_CR: Final = 13
_LF: Final = 10


class FrameCode(enum.StrEnum):
    """FrameRejection codes, one per way a frame can fail."""

    MALFORMED = "malformed"
    TOO_MANY_FIELDS = "too-many-fields"
    FIELD_TOO_LARGE = "field-too-large"
    FRAME_TOO_LARGE = "frame-too-large"
    TRUNCATED = "truncated"


Frame: TypeAlias = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class FrameRejection:
    """Why bytes (or a frame, or a decoded object) were refused.

    ``offset`` is the stream offset of the rejected frame's first byte (``None`` when the
    rejection is not about a position in a byte stream, as in the message layer).
    """

    code: str
    reason: str
    offset: int | None = None


ReadResult: TypeAlias = Frame | FrameRejection | Literal[NeedData.NEED_DATA]


@dataclass(frozen=True, slots=True)
class ReaderStatistics:
    """Counters of a reader: rejections so far, bytes skipped while resyncing, bytes held."""

    rejections: int
    bytes_skipped: int
    buffered: int


class FrameReader(Protocol):
    """What both readers offer."""

    def feed(self, data: bytes | bytearray | memoryview) -> None: ...
    def next(self) -> ReadResult: ...
    def eof(self) -> FrameRejection | None: ...
    def statistics(self) -> ReaderStatistics: ...
    def __iter__(self) -> Iterator[Frame | FrameRejection]: ...


_BAD_START: Final = "a frame must start with '*' at the beginning of a line"
_BAD_COUNT: Final = (
    "bad frame header: expected '*', a field count (decimal, no sign or leading zeros) and CRLF"
)

# Whole canonical headers (CRLF included) of small counts and lengths, to their value: one
# slice and one dict look-up read and validate a header. Misses take the general path.
# (bytearray slices are unhashable: a bytearray buffer looks them up through bytes().)
_COUNTS: Final[dict[bytes | bytearray, int]] = {b"*%d\r\n" % i: i for i in range(_TABLE_SIZE)}
_LENGTHS: Final[dict[bytes | bytearray, int]] = {b"$%d\r\n" % i: i for i in range(_TABLE_SIZE)}


def _length_in_bytearray(header: bytes | bytearray) -> int | None:
    return _LENGTHS.get(bytes(header))


# _read_number's answers besides a value.
_NEED: Final = -1
_BAD: Final = -2


def _bad_field_header(index: int) -> str:
    return (
        f"field {index}: bad header: expected '$', a byte length "
        "(decimal, no sign or leading zeros) and CRLF"
    )


def _bad_digits(digits: bytes | bytearray) -> bool:
    """True unless ``digits`` is a canonical decimal (what hiredis also insists on)."""
    return not digits.isdigit() or (digits[0] == 48 and len(digits) > 1)


def _read_number(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """Read the header at ``pos`` (its type byte already checked): ``(value, next index)``.

    The value is ``_NEED`` while the header may still become valid, ``_BAD`` once it cannot.
    """
    end = buf.find(b"\r\n", pos + 1, pos + _HEADER_SPAN)
    if end >= 0:
        digits = buf[pos + 1 : end]
        return (_BAD, pos) if _bad_digits(digits) else (int(digits), end + 2)
    if len(buf) - pos >= _HEADER_SPAN:
        return _BAD, pos
    digits = buf[pos + 1 :]
    if digits.endswith(b"\r"):
        digits = digits[:-1]
    if digits and (_bad_digits(digits) or len(digits) > MAX_LENGTH_DIGITS):
        return _BAD, pos
    return _NEED, pos


class PureReader:
    """Incremental frame reader in pure Python. See the module docstring for the contract.

    ``next()`` parses up to :data:`_BATCH` results in one tight loop and hands them out one
    by one: the per-call overhead is paid once per batch, not once per frame.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_count",
        "_fields",
        "_max_field_bytes",
        "_max_fields",
        "_max_frame_bytes",
        "_pos",
        "_ready",
        "_rejections",
        "_scan",
        "_size",
        "_skip_from",
        "_skipped",
        "_start",
    )

    def __init__(
        self,
        *,
        max_fields: int = DEFAULT_MAX_FIELDS,
        max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        for name, value in (
            ("max_fields", max_fields),
            ("max_field_bytes", max_field_bytes),
            ("max_frame_bytes", max_frame_bytes),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, not {value}")
        self._max_fields = max_fields
        self._max_field_bytes = max_field_bytes
        self._max_frame_bytes = max_frame_bytes
        self._buf: bytes | bytearray = b""
        self._base = 0  # stream offset of _buf[0]
        self._pos = 0  # next header to read (the rejected frame's start while resyncing)
        self._start = -1  # index of the frame being read, -1 between frames
        self._count = 0  # fields the frame being read declared
        self._fields: list[bytes] = []  # its fields read so far
        self._size = 0  # its encoded bytes read so far
        self._scan = -1  # while resyncing: first index where a '*' may restart, else -1
        self._skip_from = 0  # stream offset where the skipped run began
        self._ready: deque[Frame | FrameRejection] = deque()
        self._rejections = 0
        self._skipped = 0

    # -- feeding ---------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes from the stream. Checks nothing: call :meth:`next` afterwards."""
        if not data:
            return
        buf = self._buf
        keep = self._keep()
        rest = len(buf) - keep
        if rest <= 0:
            self._shift(len(buf))
            self._buf = bytes(data)
        elif type(buf) is bytearray:
            buf += data
        elif rest <= _REBUILD_AT_MOST or rest <= len(data):
            self._shift(keep)
            self._buf = buf[keep:] + bytes(data)
        else:
            self._shift(keep)
            grown = bytearray(memoryview(buf)[keep:])
            grown += data
            self._buf = grown

    def _keep(self) -> int:
        """Index of the first buffered byte still needed."""
        if self._scan >= 0:
            return self._scan - 1
        return self._start if self._start >= 0 else self._pos

    def _shift(self, dropped: int) -> None:
        """Account for ``dropped`` bytes removed from the front of the buffer."""
        self._base += dropped
        self._pos -= dropped
        if self._start >= 0:
            self._start -= dropped
        if self._scan >= 0:
            self._scan -= dropped

    # -- reading ---------------------------------------------------------------------------

    def next(self) -> ReadResult:
        """The next frame, a :class:`FrameRejection`, or :data:`NEED_DATA`."""
        ready = self._ready
        if not ready:
            self._parse()
            if not ready:
                return NEED_DATA
        return ready.popleft()

    def _parse(self, budget: int = _BATCH) -> None:
        """Parse up to ``budget`` results into ``self._ready``."""
        ready = self._ready
        while budget > 0:
            if self._scan >= 0 and not self._resync():
                return
            if self._start >= 0:
                result = self._read_fields(self._start, self._pos, self._count, self._fields)
            else:
                if type(self._buf) is bytes:
                    budget -= self._read_simple_frames(budget)
                    if budget <= 0:
                        return
                result = self._read_frame()
            if result is NEED_DATA:
                return
            ready.append(result)
            budget -= 1

    def _read_simple_frames(self, budget: int) -> int:
        """Queue whole frames with small headers, as long as nothing needs a decision.

        The fast path: it stops, leaving the frame to :meth:`_read_frame`, at anything else
        (a header not in the tables, a partial frame, a bad terminator, a limit). Returns
        how many frames it queued.
        """
        buf = self._buf
        n = len(buf)
        pos = self._pos
        counts = _COUNTS.get
        lengths = _LENGTHS.get
        max_fields = self._max_fields
        max_field = self._max_field_bytes
        max_frame = self._max_frame_bytes
        queue = self._ready.append
        done = 0
        while done < budget:
            count = counts(buf[pos : pos + 4])
            if count is None or count > max_fields:
                break
            cursor = pos + 4
            fields: list[bytes] = []
            for _ in range(count):
                length = lengths(buf[cursor : cursor + 4])
                if length is None:
                    length = lengths(buf[cursor : cursor + 5])
                    if length is None:
                        break
                    body = cursor + 5
                else:
                    body = cursor + 4
                stop = body + length
                if stop + 2 > n or buf[stop] != _CR or buf[stop + 1] != _LF or length > max_field:
                    break
                fields.append(buf[body:stop])  # type: ignore[arg-type]  # buf is bytes here
                cursor = stop + 2
            else:
                if cursor - pos > max_frame:
                    break
                queue(tuple(fields))
                pos = cursor
                done += 1
                continue
            break
        self._pos = pos
        return done

    def _read_frame(self) -> ReadResult:
        buf = self._buf
        start = self._pos
        n = len(buf)
        if start >= n:
            if n:
                self._shift(n)
                self._buf = b""
            return NEED_DATA
        if start >= _COMPACT_AT and type(buf) is bytearray:
            del buf[:start]
            self._shift(start)
            start = 0
        count = _COUNTS.get(bytes(buf[start : start + 4]))
        if count is not None:
            pos = start + 4
        elif buf[start] != _STAR:
            return self._reject(start, start, FrameCode.MALFORMED, _BAD_START)
        else:
            count, pos = _read_number(buf, start)
            if count < 0:
                if count == _NEED:
                    return NEED_DATA
                return self._reject(start, start, FrameCode.MALFORMED, _BAD_COUNT)
        if count > self._max_fields:
            reason = f"frame declares {count} fields; the limit is {self._max_fields}"
            return self._reject(start, start, FrameCode.TOO_MANY_FIELDS, reason)
        self._size = pos - start
        return self._read_fields(start, pos, count, [])

    def _read_fields(  # noqa: PLR0912 - the hot loop stays in one frame for speed
        self, start: int, pos: int, count: int, fields: list[bytes]
    ) -> ReadResult:
        """Read fields from ``pos`` until the frame at ``start`` is whole (the hot loop)."""
        buf = self._buf
        n = len(buf)
        size = self._size
        max_field = self._max_field_bytes
        max_frame = self._max_frame_bytes
        lookup = _LENGTHS.get if type(buf) is bytes else _length_in_bytearray
        index = len(fields)
        while index < count:
            length = lookup(buf[pos : pos + 4])
            if length is not None:
                body = pos + 4
            else:
                length = lookup(buf[pos : pos + 5])
                if length is not None:
                    body = pos + 5
                elif pos >= n:
                    break
                elif buf[pos] != _DOLLAR:
                    return self._reject(start, pos, FrameCode.MALFORMED, _bad_field_header(index))
                else:
                    length, body = _read_number(buf, pos)
                    if length < 0:
                        if length == _NEED:
                            break
                        return self._reject(
                            start, pos, FrameCode.MALFORMED, _bad_field_header(index)
                        )
            if length > max_field:
                reason = f"field {index} declares {length} bytes; the limit is {max_field}"
                return self._reject(start, pos, FrameCode.FIELD_TOO_LARGE, reason)
            stop = body + length
            if size + stop + 2 - pos > max_frame:
                reason = f"frame exceeds {max_frame} bytes at field {index}"
                return self._reject(start, pos, FrameCode.FRAME_TOO_LARGE, reason)
            if stop + 2 > n:
                if stop < n and buf[stop] != _CR:
                    return self._unterminated(start, stop, index, length)
                break
            if buf[stop] != _CR or buf[stop + 1] != _LF:
                return self._unterminated(start, stop, index, length)
            fields.append(bytes(buf[body:stop]))
            size += stop + 2 - pos
            pos = stop + 2
            index += 1
        else:
            self._start = -1
            self._pos = pos
            return tuple(fields)
        self._start = start
        self._pos = pos
        self._count = count
        self._fields = fields
        self._size = size
        return NEED_DATA

    def _unterminated(self, start: int, stop: int, index: int, length: int) -> FrameRejection:
        reason = f"field {index}: its {length} bytes of data are not followed by CRLF"
        return self._reject(start, stop, FrameCode.MALFORMED, reason)

    # -- rejection and resync --------------------------------------------------------------

    def _reject(self, start: int, at: int, code: FrameCode, reason: str) -> FrameRejection:
        """Refuse the frame at ``start`` (error found at ``at``) and begin resyncing."""
        self._start = -1
        self._fields = []
        self._rejections += 1
        self._scan = max(at, start + 1)
        self._skip_from = self._base + start
        return FrameRejection(str(code), reason, self._base + start)

    def _resync(self) -> bool:
        """Skip to the next '*' at a line start; False while none has arrived yet."""
        buf = self._buf
        found = buf.find(b"\n*", self._scan - 1)
        if found >= 0:
            self._pos = found + 1
            self._scan = -1
            self._skipped += self._base + self._pos - self._skip_from
            return True
        self._scan = max(len(buf), self._scan)
        return False

    # -- end of stream and introspection ---------------------------------------------------

    def eof(self) -> FrameRejection | None:
        """The stream has ended. Returns a ``truncated`` rejection if a frame was cut short.

        Call it after ``next()`` returned ``NEED_DATA``; the reader is empty afterwards and
        may be fed a new stream.
        """
        self._ready.clear()
        start = self._keep()
        held = len(self._buf) - start
        verdict = None
        if self._scan >= 0:
            self._skipped += self._base + len(self._buf) - self._skip_from
        elif held > 0:
            self._rejections += 1
            reason = f"the stream ended inside a frame ({held} bytes of it were read)"
            verdict = FrameRejection(str(FrameCode.TRUNCATED), reason, self._base + start)
        self._start = -1
        self._scan = -1
        self._fields = []
        self._shift(len(self._buf))
        self._pos = 0
        self._buf = b""
        return verdict

    def statistics(self) -> ReaderStatistics:
        """Rejections so far, bytes skipped while resyncing, and bytes held unparsed."""
        keep = self._keep()
        held = max(len(self._buf) - keep, 0)
        skipped = self._skipped
        if self._scan >= 0:  # a skip in progress: what lies before the kept byte is gone
            skipped += self._base + keep - self._skip_from
        return ReaderStatistics(self._rejections, skipped, held)

    def __iter__(self) -> Iterator[Frame | FrameRejection]:
        """Every result available now, up to (not including) ``NEED_DATA``."""
        while (result := self.next()) is not NEED_DATA:
            yield result


def encode_frame(
    fields: Iterable[bytes | bytearray | str],
    *,
    max_fields: int = DEFAULT_MAX_FIELDS,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    """One frame as bytes, ready for a single write. ``str`` fields are encoded as UTF-8.

    Raises ``ValueError`` when the frame would break a limit a reader enforces (a caller bug:
    the reader on the other end would reject it), ``TypeError`` for a field of another type.
    """
    parts = [b""]
    for index, field in enumerate(fields):
        data = field.encode("utf-8") if isinstance(field, str) else bytes(field)
        if len(data) > max_field_bytes:
            raise ValueError(f"field {index} is {len(data)} bytes; the limit is {max_field_bytes}")
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    count = (len(parts) - 1) // 3
    if count > max_fields:
        raise ValueError(f"frame has {count} fields; the limit is {max_fields}")
    parts[0] = b"*%d\r\n" % count
    frame = b"".join(parts)
    if len(frame) > max_frame_bytes:
        raise ValueError(f"frame is {len(frame)} bytes; the limit is {max_frame_bytes}")
    return frame
