"""``tether inbox``: read a run's inbox messages, or drain an inbox file.

    tether inbox RUN [--follow] [--json] [--db PATH] [--no-drain]
    tether inbox drain FILE [--run ID] [--db PATH] [--follow]

Reading a run first drains its inbox file (``<runs dir>/RUN/inbox.jsonl``)
when it exists, so the messages are complete even if no drainer is running.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tether import exits

if TYPE_CHECKING:
    from tether.inbox.store import InboxStore, StoredMessage

_TEXT_LIMIT = 2000
_FOLLOW_INTERVAL = 0.25


def main(argv: list[str], prog: str = "tether inbox") -> int:
    if argv and argv[0] == "drain":
        return _drain_main(argv[1:], f"{prog} drain")
    return _read_main(argv, prog)


# -- tether inbox RUN ----------------------------------------------------------


def _read_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print a run's inbox messages (drained into tether's database).",
        epilog=f"To drain one file: {prog} drain FILE [--run ID] [--db PATH]",
    )
    parser.add_argument("run", metavar="RUN", help="the run id")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new messages")
    parser.add_argument("--json", action="store_true", help="one JSON object per message per line")
    parser.add_argument("--db", type=Path, help="the database (default: tether's state dir)")
    parser.add_argument(
        "--no-drain", action="store_true", help="do not drain the run's inbox file first"
    )
    return parser


def _read_main(argv: list[str], prog: str) -> int:
    args = _read_parser(prog).parse_args(argv)
    from tether.inbox.store import open_store

    inbox = None if args.no_drain else _run_inbox(args.run)
    try:
        store = open_store(args.db)
    except OSError as exc:
        print(f"{prog}: cannot open the database: {exc}", file=sys.stderr)
        return exits.USAGE
    with store:
        last = _catch_up(store, args.run, inbox, args.json, sys.stdout)
        if last < 0 and not args.follow and store.offset_state(args.run) is None:
            where = f" (and no file at {inbox})" if inbox is not None else ""
            print(f"{prog}: no inbox messages for run {args.run!r}{where}", file=sys.stderr)
            return exits.USAGE
        if not args.follow:
            return 0
        try:
            while True:
                time.sleep(_FOLLOW_INTERVAL)
                last = _catch_up(store, args.run, inbox, args.json, sys.stdout, after=last)
        except KeyboardInterrupt:
            return 0


def _run_inbox(run_id: str) -> Path | None:
    from tether.inbox.writer import INBOX_FILENAME
    from tether.paths import runs_dir

    if not run_id or "/" in run_id or run_id in (".", ".."):
        return None
    candidate = runs_dir() / run_id / INBOX_FILENAME
    return candidate if candidate.exists() else None


def _catch_up(
    store: InboxStore,
    run_id: str,
    inbox: Path | None,
    as_json: bool,
    out: TextIO,
    *,
    after: int = -1,
) -> int:
    """Drain the inbox file (if any), print rows past ``after``; return the last offset."""
    if inbox is not None:
        from tether.inbox.drain import drain_file

        result = drain_file(store, inbox, run_id)
        if result.incident is not None:
            print(f"tether inbox: {result.incident}", file=sys.stderr)
    while page := store.messages(run_id, after=after, limit=1000):
        for message in page:
            out.write(_render_json(message) if as_json else render_human(message))
            out.write("\n")
        after = page[-1].offset
    out.flush()
    return after


def _render_json(message: StoredMessage) -> str:
    return message.to_json().decode()


_FIELDS = {
    "progress": "text",
    "clarification": "q",
    "result_partial": "note",
    "done": "summary",
    "approval_request": "reason",
}
_MARKS = {"clarification": "? ", "approval_request": "! "}


def render_human(message: StoredMessage) -> str:
    """One plain-text line: time, kind, text (control characters escaped)."""
    stamp = datetime.fromtimestamp(message.received_at).strftime("%H:%M:%S")
    if message.rejected_reason is not None:
        detail = f"{message.rejected_reason} | {message.raw or ''}"
        return f"{stamp}  {'rejected':<16} @{message.offset}: {_clean(detail)}"
    from tether.inbox.messages import OtherMessage

    decoded = message.message()
    kind = message.type or "object"
    field = _FIELDS.get(kind)
    if field is not None and not isinstance(decoded, OtherMessage):
        text = _MARKS.get(kind, "") + str(getattr(decoded, field))
    else:
        text = message.body or ""
    return f"{stamp}  {kind:<16} {_clean(text)}"


def _clean(text: str) -> str:
    if len(text) > _TEXT_LIMIT:
        text = f"{text[:_TEXT_LIMIT]}… ({len(text) - _TEXT_LIMIT} more characters)"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# -- tether inbox drain FILE -----------------------------------------------------


def _drain_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Drain one inbox file into tether's database."
    )
    parser.add_argument("file", metavar="FILE", type=Path, help="the inbox file (JSONL)")
    parser.add_argument(
        "--run", help="the run id (default: the run directory's name, or the file's stem)"
    )
    parser.add_argument("--db", type=Path, help="the database (default: tether's state dir)")
    parser.add_argument(
        "--follow", action="store_true", help="keep draining as the file grows (Ctrl-C stops)"
    )
    return parser


def _drain_main(argv: list[str], prog: str) -> int:
    args = _drain_parser(prog).parse_args(argv)
    from tether.inbox.writer import run_id_for_inbox

    run_id = args.run or run_id_for_inbox(args.file)
    if args.follow:
        return _follow_drain(args.file, run_id, args.db)
    from tether.inbox.drain import STATUS_MISSING, drain_file
    from tether.inbox.store import open_store

    try:
        with open_store(args.db) as store:
            result = drain_file(store, args.file, run_id)
    except OSError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exits.USAGE
    if result.status == STATUS_MISSING:
        print(f"{prog}: no such file: {args.file}", file=sys.stderr)
        return exits.USAGE
    if result.incident is not None:
        print(f"{prog}: warning: {result.incident}", file=sys.stderr)
    print(f"drained {result.summary()}")
    return 0


def _follow_drain(path: Path, run_id: str, db: Path | None) -> int:
    import asyncio
    import signal

    from tether.inbox.live import InboxDrain

    async def follow() -> str:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with InboxDrain(db) as drain:
            drain.add(path, run_id)
            await stop.wait()
        stats = drain.statistics()
        return (
            f"drained {path} (run {run_id}): {stats.new} new, {stats.duplicates} duplicates"
            f" skipped, {stats.rejected} rejected"
        )

    print(asyncio.run(follow()))
    return 0
