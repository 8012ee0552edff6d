"""The hiredis-backed RESP frame reader (the ``fast`` extra).

:class:`HiredisReader` keeps :class:`tether.framing.resp.PureReader`'s contract exactly:
hiredis parses whole frames, every batch it returns is checked against the exact bytes
and the limits, and anything doubtful goes to the pure parser. :func:`open_reader` (here,
so that :mod:`tether.framing.resp` never imports this module) picks it when hiredis is
installed.
"""

from __future__ import annotations

import importlib.util
from itertools import chain, repeat
from typing import Any, Final

from tether.framing.resp import (
    _BATCH,
    _COPY_AT_MOST,
    _HIREDIS_SLICE,
    _TABLE_SIZE,
    DEFAULT_MAX_FIELD_BYTES,
    DEFAULT_MAX_FIELDS,
    DEFAULT_MAX_FRAME_BYTES,
    FrameRejection,
    PureReader,
    ReadResult,
)
from tether.wire.needdata import NEED_DATA

__all__ = ["HiredisReader", "hiredis_available", "open_reader"]


class _HeaderCache(dict[int, bytes]):
    """Length -> ``$<length>\\r\\n``; computed (not stored) beyond the table."""

    def __missing__(self, length: int) -> bytes:
        return b"$%d\r\n" % length


_HEADERS_BY_LENGTH: Final = _HeaderCache((i, b"$%d\r\n" % i) for i in range(_TABLE_SIZE))
_COUNT_HEADERS: Final = [b"*%d\r\n" % i for i in range(DEFAULT_MAX_FIELDS + 1)]
_CRLF_FOREVER: Final = repeat(b"\r\n")


class HiredisReader(PureReader):
    """The same reader with ``hiredis.Reader`` parsing whole frames.

    hiredis is lax where this protocol is strict (it accepts ``+``, ``:``, nested and null
    replies, and does not check the CRLF after bulk data) and has no limits, so each batch
    of replies is re-encoded and compared with the exact bytes in the buffer (one compare
    per batch). A batch that does not match, a reply that is not an array, a hiredis
    protocol error, or a partial frame hands the stream to the pure parser from the last
    verified frame on, so frames, rejections and resync points are those of
    :class:`PureReader`; a fresh hiredis reader resumes at the next frame boundary. hiredis
    is fed from the buffer in slices of at most :data:`_HIREDIS_SLICE` bytes, because it
    moves its whole unread buffer after each reply (quadratic on one huge feed).
    """

    __slots__ = ("_fed", "_hiredis", "_hr")

    def __init__(
        self,
        *,
        max_fields: int = DEFAULT_MAX_FIELDS,
        max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__(
            max_fields=max_fields,
            max_field_bytes=max_field_bytes,
            max_frame_bytes=max_frame_bytes,
        )
        import hiredis

        self._hiredis: Any = hiredis
        self._hr: Any = hiredis.Reader()
        self._fed = 0  # the buffer up to here has been fed to self._hr

    def _shift(self, dropped: int) -> None:
        super()._shift(dropped)
        self._fed -= dropped

    def next(self) -> ReadResult:
        ready = self._ready
        if ready:
            return ready.popleft()
        if self._hr is not None:
            self._parse_hiredis()
            if ready:
                return ready.popleft()
            if self._hr is not None:
                return NEED_DATA
        self._parse(1)  # only up to the next frame boundary, where hiredis takes over again
        if self._start < 0 and self._scan < 0:
            self._hr = self._hiredis.Reader()
            self._fed = self._pos
        return ready.popleft() if ready else NEED_DATA

    def _parse_hiredis(self) -> None:
        """Queue a verified batch of hiredis replies; drop hiredis where it cannot go on."""
        hr = self._hr
        buf = self._buf
        replies: list[Any] = []
        reply: Any = False
        while len(replies) < _BATCH:
            try:
                reply = hr.gets()
            except (self._hiredis.HiredisError, TypeError, ValueError):
                # a protocol error, or a RESP3 map/set whose keys are arrays (unhashable)
                reply = None
                break
            if reply.__class__ is list:
                replies.append(reply)
            elif reply is not False or self._fed >= len(buf):
                break
            else:
                end = min(len(buf), self._fed + _HIREDIS_SLICE)
                hr.feed(buf, self._fed, end - self._fed)
                self._fed = end
        if replies:
            size = self._verified_size(replies)
            if not size:
                self._hr = None
                return
            self._pos += size
            self._ready.extend(map(tuple, replies))
        if reply.__class__ is not list and (reply is not False or self._pos < len(buf)):
            self._hr = None

    def _verified_size(self, replies: list[list[Any]]) -> int:
        """Bytes the replies occupy if they are exactly the next bytes and within limits.

        Returns 0 (never a valid size) when the pure parser must decide instead. Small
        fields are checked by re-encoding the whole batch and comparing once; large ones
        in place, field by field, to avoid copying them.
        """
        if max(map(len, replies)) > min(self._max_fields, DEFAULT_MAX_FIELDS):
            return 0
        try:
            fields = list(chain.from_iterable(replies))
            lengths = list(map(len, fields))
        except TypeError:  # an element without a length: not a bulk string
            return 0
        payload = sum(lengths)
        if payload > self._max_field_bytes or payload > self._max_frame_bytes:
            return 0  # a limit may be broken: the pure parser checks frame by frame
        if payload > _COPY_AT_MOST:
            size = self._compare_in_place(replies)
        else:
            size = self._compare_encoded(replies, fields, lengths)
        return size if size <= self._max_field_bytes and size <= self._max_frame_bytes else 0

    def _compare_encoded(
        self, replies: list[list[Any]], fields: list[Any], lengths: list[int]
    ) -> int:
        heads = list(map(_HEADERS_BY_LENGTH.__getitem__, lengths))
        first = 0  # each frame's '*<count>' header goes in front of its first field's header
        for reply in replies:
            count = len(reply)
            if not count:
                return 0  # '*0': rare, left to the pure parser
            heads[first] = _COUNT_HEADERS[count] + heads[first]
            first += count
        try:
            expected = b"".join(
                chain.from_iterable(zip(heads, fields, _CRLF_FOREVER, strict=False))
            )
        except TypeError:  # an element that is not bytes: a nested or non-string reply
            return 0
        return len(expected) if self._buf.startswith(expected, self._pos) else 0

    def _compare_in_place(self, replies: list[list[Any]]) -> int:
        buf = self._buf
        pos = start = self._pos
        for reply in replies:
            head = _COUNT_HEADERS[len(reply)]
            if not buf.startswith(head, pos):
                return 0
            pos += len(head)
            for field in reply:
                if field.__class__ is not bytes:
                    return 0
                head = _HEADERS_BY_LENGTH[len(field)]
                if not buf.startswith(head, pos):
                    return 0
                pos += len(head)
                if not buf.startswith(field, pos) or not buf.startswith(b"\r\n", pos + len(field)):
                    return 0
                pos += len(field) + 2
        return pos - start

    def eof(self) -> FrameRejection | None:
        verdict = super().eof()
        self._hr = self._hiredis.Reader()
        self._fed = 0
        return verdict


def hiredis_available() -> bool:
    """True when ``hiredis`` can be imported (checked without importing it)."""
    return importlib.util.find_spec("hiredis") is not None


def open_reader(
    *,
    max_fields: int = DEFAULT_MAX_FIELDS,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    use_hiredis: bool | None = None,
) -> PureReader:
    """A new frame reader: hiredis-backed when installed (``use_hiredis=None``), or as asked.

    ``use_hiredis=True`` raises ``ImportError`` when hiredis is missing. A reader holds no
    resources: there is nothing to close.
    """
    if use_hiredis is None:
        use_hiredis = hiredis_available()
    cls = HiredisReader if use_hiredis else PureReader
    return cls(
        max_fields=max_fields, max_field_bytes=max_field_bytes, max_frame_bytes=max_frame_bytes
    )
