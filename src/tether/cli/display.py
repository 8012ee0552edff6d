"""``tether display``: render a resp, wire or stream-json stream through the display.

Every input goes through the one display boundary (:mod:`tether.display`):

- ``--from wire``: JSONL wire events (a run's ``events.jsonl``), each line validated with
  ``tether.wire.decode(line, "event")``. The first run seen is the top run; events of other
  runs are drawn nested under it. The top run's ``result`` (and ``exit``) end with the
  final answer, exactly as ``tether run`` ends.
- ``--from resp``: bash-agent RESP frames (``util_write_msg`` output), read with
  ``tether.framing.resp`` and turned into display messages with ``from_fields``.
- ``--from stream-json``: stream-json objects, one per line (``from_stream_json``).

A line or frame that cannot be read becomes a warning naming its position; the rest of the
stream is still drawn. Unlike ``tether run``, the drawing goes to stdout even when it is not
a terminal (this command exists to draw), and the final answer follows it there.
Exit status: 0, or 1 when some input was rejected, 2 for usage errors and unreadable files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO, Final

from tether import exits
from tether.numbers import count

if TYPE_CHECKING:
    from tether.display import Display
    from tether.wire.lines import Line, TooLarge

CHUNK: Final = 64 * 1024
# stream-json lines carry whole tool outputs (bash-agent caps them at 100000 bytes).
MAX_JSON_LINE_BYTES: Final = 16 * 1024 * 1024


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Render a resp, wire or stream-json stream through tether's display.",
    )
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        choices=("resp", "wire", "stream-json"),
        help="the input format",
    )
    parser.add_argument(
        "--output",
        default="human",
        choices=("human", "stream-json"),
        help="how to draw it (default: human)",
    )
    parser.add_argument(
        "--width", type=count(20, 10_000), default=None, help="columns (default: terminal)"
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour and a live status line (default: auto, only on a terminal)",
    )
    parser.add_argument("file", nargs="?", default="-", help="input file, or - for stdin")
    return parser


def _read_chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def _lines(stream: BinaryIO, max_line_bytes: int) -> Iterator[Line | TooLarge]:
    """Lines of the stream (the last one even without a newline), bounded in length."""
    from tether.wire import LineSplitter

    splitter = LineSplitter(max_line_bytes=max_line_bytes)
    last = b"\n"
    for chunk in _read_chunks(stream):
        splitter.feed(chunk)
        last = chunk[-1:]
        while items := splitter.read():
            yield from items
    if last != b"\n":
        splitter.feed(b"\n")
        while items := splitter.read():
            yield from items


def _wire(stream: BinaryIO, display: Display) -> int:
    from tether.display.replay import WireReplay
    from tether.wire import MAX_LINE_BYTES, TooLarge

    replay = WireReplay(display)
    for item in _lines(stream, MAX_LINE_BYTES):
        if isinstance(item, TooLarge):
            replay.too_large(MAX_LINE_BYTES)
        else:
            replay.line(item.data)
    replay.finish()
    return replay.rejected


def _resp(stream: BinaryIO, display: Display) -> int:
    from tether.framing.messages import from_fields
    from tether.framing.resp import FrameRejection
    from tether.framing.resp_hiredis import open_reader

    reader = open_reader()
    rejected = 0
    frames = 0

    def drain() -> None:
        nonlocal rejected, frames
        for frame in reader:
            frames += 1
            result = frame if isinstance(frame, FrameRejection) else from_fields(list(frame))
            if isinstance(result, FrameRejection):
                rejected += 1
                where = f"byte {result.offset}" if result.offset is not None else f"frame {frames}"
                display.notice(f"{where}: {result.code}: {result.reason}", level="warning")
            else:
                display.message(result)

    for chunk in _read_chunks(stream):
        reader.feed(chunk)
        drain()
    end = reader.eof()
    if end is not None:
        rejected += 1
        display.notice(f"byte {end.offset}: {end.code}: {end.reason}", level="warning")
    return rejected


def _stream_json(stream: BinaryIO, display: Display) -> int:
    from tether.framing.resp import FrameRejection
    from tether.framing.stream_json import decode_line, from_stream_json
    from tether.wire.lines import TooLarge

    rejected = 0
    for number, item in enumerate(_lines(stream, MAX_JSON_LINE_BYTES), 1):
        if isinstance(item, TooLarge):
            problem = f"too-large: line exceeds {MAX_JSON_LINE_BYTES} bytes"
        elif not item.data.strip():
            continue
        else:
            obj = decode_line(item.data)
            result = obj if isinstance(obj, FrameRejection) else from_stream_json(obj)
            if not isinstance(result, FrameRejection):
                display.message(result)
                continue
            problem = f"{result.code}: {result.reason}"
        rejected += 1
        display.notice(f"line {number}: {problem}", level="warning")
    return rejected


def main(argv: list[str], prog: str) -> int:
    args = _parser(prog).parse_args(argv)
    from tether.display import open_display

    color = {"auto": None, "always": True, "never": False}[args.color]
    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"{prog}: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    reader = {"wire": _wire, "resp": _resp, "stream-json": _stream_json}[args.source]
    display = open_display(
        args.output,
        stdout=sys.stdout,
        stderr=sys.stderr,
        width=args.width,
        color=color,
        live=sys.stdout,
    )
    code = 0
    try:
        with stream:
            code = exits.USAGE if reader(stream, display) else exits.OK
    except OSError as exc:
        display.notice(f"cannot read {args.file}: {exc.strerror or exc}", level="error")
        code = 2
    except KeyboardInterrupt:
        code = exits.CANCELLED
    finally:
        display.close()
        _settle_stdout()
    return code


def _settle_stdout() -> None:
    """Flush stdout; if its reader went away, point it at /dev/null so exit stays quiet."""
    import os

    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
