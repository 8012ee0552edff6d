"""``tether wire validate`` and ``tether wire table``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgspec

from tether import exits
from tether.wire import Receiver, Rejection, decode, tag_of
from tether.wire.lines import Line, LineSplitter


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Wire protocol tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "validate",
        help="print one JSON verdict per input line; exit 2 if any line was rejected",
        description="Validate wire lines. Prints {line, ok, type} or {line, ok, code, reason} "
        "per line and exits 2 if any line was rejected.",
    )
    check.add_argument("--direction", choices=("control", "event"), default="event")
    check.add_argument(
        "--sequence", action="store_true", help="also require strictly increasing seq across lines"
    )
    check.add_argument("file", nargs="?", default="-", help="a JSONL file, or - for stdin")
    sub.add_parser("table", help="print the run state table (Markdown)")
    return parser


def _lines(stream: BinaryIO) -> Iterator[tuple[int, Line | None]]:
    """(line number, line) pairs; None for a line too large to hold (it was skipped)."""
    splitter = LineSplitter()
    number = 0
    while chunk := stream.read(1 << 16):
        splitter.feed(chunk)
        while items := splitter.read():
            for item in items:
                number += 1
                yield number, item if isinstance(item, Line) else None
    splitter.feed(b"\n")  # a last line without its newline still counts
    for item in splitter.read():
        if not isinstance(item, Line) or item.data:
            number += 1
            yield number, item if isinstance(item, Line) else None


def _verdict(number: int, result: Any) -> dict[str, Any]:
    if isinstance(result, Rejection):
        return {"line": number, "ok": False, "code": str(result.code), "reason": result.reason}
    return {"line": number, "ok": True, "type": tag_of(type(result))}


def validate_stream(stream: BinaryIO, out: Any, *, direction: str, sequence: bool) -> int:
    receiver = Receiver(direction) if sequence else None
    rejected = False
    encode = msgspec.json.encode
    too_large = Rejection(code="too-large", reason="line exceeds 65536 bytes")  # type: ignore[arg-type]
    for number, line in _lines(stream):
        if line is None:
            result: Any = too_large
        elif receiver is not None:
            result = receiver.receive(line.data)
        else:
            result = decode(line.data, direction)
        verdict = _verdict(number, result)
        rejected |= not verdict["ok"]
        out.write(encode(verdict) + b"\n")
    return exits.USAGE if rejected else exits.OK


def main(argv: list[str], prog: str = "tether wire") -> int:
    args = _parser(prog).parse_args(argv)
    if args.command == "table":
        from tether.wire.table import render_markdown

        sys.stdout.write(render_markdown())
        return 0
    out = sys.stdout.buffer
    if args.file == "-":
        return validate_stream(
            sys.stdin.buffer, out, direction=args.direction, sequence=args.sequence
        )
    try:
        with open(args.file, "rb") as stream:
            return validate_stream(stream, out, direction=args.direction, sequence=args.sequence)
    except OSError as exc:
        print(f"{prog}: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
