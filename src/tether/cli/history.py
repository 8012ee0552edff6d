"""``tether runs``, ``tether show RUN`` and ``tether replay RUN``: the run history.

Runs are found in the run index (``runs_*`` tables of the state directory's database);
each run's permanent log is ``events.jsonl`` in its run directory. ``replay`` feeds that
log to a fresh display through the same :class:`~tether.cli.run.DisplayFeed` the live
``tether run`` uses, so it renders what the live view rendered. RUN is a run id, a
unique prefix or suffix of one, or ``latest``.

What ``runs`` and ``show`` print holds a child's words (a sub-agent's task, the final
answer, its errors), so it goes through :mod:`tether.display.sanitize`: no escape sequence
or control character reaches the terminal, and ``--json`` lines carry C1 controls as
``\\u`` escapes (the same JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import exits
from tether.numbers import count

if TYPE_CHECKING:
    from tether.store.index import RunIndex, RunRecord


def main(argv: list[str], prog: str = "tether runs") -> int:
    command = prog.rsplit(maxsplit=1)[-1]
    handlers = {"runs": _runs, "show": _show, "replay": _replay}
    handler = handlers.get(command, _runs)
    parser = _parser(command, prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exits.OK if exc.code in (0, None) else exits.USAGE
    return handler(args)


def _parser(command: str, prog: str) -> argparse.ArgumentParser:
    if command == "show":
        parser = argparse.ArgumentParser(prog=prog, description="Summarise one recorded run.")
        parser.add_argument("run", help="run id, unique prefix/suffix, or 'latest'")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    elif command == "replay":
        parser = argparse.ArgumentParser(
            prog=prog, description="Render a recorded run through the display, as it ran."
        )
        parser.add_argument("run", help="run id, unique prefix/suffix, or 'latest'")
        parser.add_argument("--output", choices=("human", "stream-json", "wire"), default="human")
    else:
        parser = argparse.ArgumentParser(prog=prog, description="List recorded runs, newest first.")
        parser.add_argument("--limit", type=count(), default=20, help="how many (default 20)")
        parser.add_argument("--status", help="only runs with this status")
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


# -- finding runs ------------------------------------------------------------------------


def find_run(ref: str) -> tuple[RunRecord | None, Path | None, str]:
    """The index row and the run directory for ``ref``, or an error message."""
    from tether.paths import runs_dir
    from tether.runtime.parent.rundir import is_run_id

    try:
        matches = _index().resolve(ref)
    except Exception as exc:  # noqa: BLE001 (a broken index must not hide the logs)
        matches = []
        problem = f"the run index cannot be read: {exc}"
    else:
        problem = f"no run matches {ref!r} (see `tether runs`)"
    if len(matches) > 1:
        names = ", ".join(m.id for m in matches[:5])
        return None, None, f"{ref!r} matches several runs: {names}"
    if matches:
        return matches[0], Path(matches[0].run_dir), ""
    if is_run_id(ref) and (runs_dir() / ref).is_dir():
        return None, runs_dir() / ref, ""
    return None, None, problem


# -- tether runs --------------------------------------------------------------------------


def _index() -> RunIndex:
    """The run index, with the rows of runs whose row could not be written (a full disk)
    recovered from their run directories first."""
    from tether.runtime.parent.recovery import recover_runs
    from tether.store.index import RunIndex

    index = RunIndex()
    recover_runs(index)
    return index


def _runs(args: argparse.Namespace) -> int:
    try:
        records = _index().recent(limit=args.limit, status=args.status)
    except Exception as exc:  # noqa: BLE001
        print(f"tether runs: cannot read the run index: {exc}", file=sys.stderr)
        return exits.USAGE  # a set-up problem (a full disk, an unsafe directory)
    from tether.display.sanitize import escape_c1_json, sanitize

    waiting = _waiting([r.id for r in records if r.status == "running"])
    if args.json:
        for record in records:
            row = _record_json(record)
            if record.id in waiting:
                row["waiting"] = waiting[record.id]
            print(escape_c1_json(json.dumps(row, ensure_ascii=False)))
        return 0
    if not records:
        print('no runs yet: start one with `tether run "task"` or `tether demo`')
        return 0
    print(f"{'RUN':22}  {'STATUS':9}  {'TIME':>7}  {'AGENT':16}  TASK")
    for record in records:
        nested = "  " if record.parent_run else ""
        provider = _who(record)
        status = "waiting" if record.id in waiting else record.status
        line = (
            f"{record.id:22}  {status:9}  {_elapsed(record):>7}  "
            f"{provider[:16]:16}  {nested}{_one_line(record.task, 60)}"
        )
        print(sanitize(line))
    return 0


def _waiting(run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """run id -> what it waits on a person for (its oldest open question), for the runs
    still running: ``{kind: approval|question, key, since}``."""
    if not run_ids:
        return {}
    from tether.inbox.store import open_store

    found: dict[str, dict[str, Any]] = {}
    try:
        with open_store() as store:
            rows = store.open_questions(run_ids)
    except Exception:  # noqa: BLE001 (a broken store must not hide the list)
        return {}
    for row in rows:
        kind = "approval" if row.type == "approval_request" else "question"
        found.setdefault(row.run_id, {"kind": kind, "key": row.msg_key, "since": row.received_at})
    return found


def _record_json(record: RunRecord) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(record)


def _agent(record: RunRecord) -> str | None:
    """The agent CLI that ran it (None: the built-in agent)."""
    agent = (record.options or {}).get("agent")
    return agent if isinstance(agent, str) and agent != "builtin" else None


def _who(record: RunRecord) -> str:
    """An agent CLI's name (and model), else the built-in agent's provider (and model)."""
    return "/".join(p for p in (_agent(record) or record.provider, record.model) if p) or "-"


def _elapsed(record: RunRecord) -> str:
    elapsed = record.elapsed_s
    return "-" if elapsed is None else f"{elapsed:.1f}s"


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- tether show --------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    record, path, problem = find_run(args.run)
    if path is None:
        print(f"tether show: {problem}", file=sys.stderr)
        return exits.USAGE
    from tether.display.sanitize import escape_c1_json, sanitize

    summary = summarise(record, path)
    if args.json:
        print(escape_c1_json(json.dumps(summary, ensure_ascii=False, indent=2)))
        return 0
    for key, value in summary.items():
        if key == "final_text":
            continue
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
        print(sanitize(f"{key.replace('_', ' ') + ':':14} {shown}"))
    final = sanitize(summary.get("final_text") or "")
    if final:
        print("final answer:")
        for line in final.splitlines()[:40]:
            print(f"  {line}")
        if len(final.splitlines()) > 40:
            print(f"  … ({len(final.splitlines()) - 40} more lines in {path / 'final.txt'})")
    return 0


def summarise(record: RunRecord | None, path: Path) -> dict[str, Any]:
    """What ``tether show`` prints: the index row plus counts from the log."""
    from tether.runtime.parent.mirror import RunMirror
    from tether.runtime.parent.replay import end_from_log, read_log
    from tether.runtime.parent.rundir import RunDir
    from tether.runtime.parent.spawn import RunEvent

    run_id = record.id if record is not None else path.name
    run = RunDir(run_id, path)
    mirror = RunMirror(run_id)
    kinds: Counter[str] = Counter()
    problems = 0
    for update in read_log(run.events, run_id, mirror, controls=run.control):
        if isinstance(update, RunEvent):
            kinds[str(type(update.event).__struct_config__.tag)] += 1
        else:
            problems += 1
    end = end_from_log(run, mirror)
    summary: dict[str, Any] = {"run": run_id}
    if record is not None:
        summary |= {
            "task": _one_line(record.task, 200),
            "status": record.status,
            "agent": _agent(record) or "builtin",
            "provider": record.provider or "-",
            "model": record.model or "-",
            "started": _when(record.created_at),
            "elapsed": _elapsed(record),
            "cwd": record.cwd or "-",
        }
        if record.parent_run:
            summary["parent run"] = record.parent_run
    else:
        summary["status"] = end.status
    summary |= {
        "turns": kinds["turn-started"],
        "tool calls": kinds["tool-call"],
        "controls": _controls(run.control),
        "events": sum(kinds.values()),
        "usage": (record.usage if record is not None else None) or end.usage or {},
    }
    if problems:
        summary["channel errors"] = problems
    error = (record.error if record is not None else None) or end.error
    if error and summary.get("status") != "done":
        summary["error"] = error
    decisions = _decisions(run_id)
    if decisions:
        denied = [d for d in decisions if d.get("decision") == "deny"]
        summary["approvals"] = {"decided": len(decisions), "denied": len(denied)}
        if denied:
            summary["denied"] = [_denial(d) for d in denied]
    children = _children(run_id)
    if children:
        summary["subagents"] = children
    summary["run dir"] = str(path)
    summary["final_text"] = end.final_text
    return summary


def _controls(path: Path) -> dict[str, int]:
    from tether import fsafe, jsondepth

    counts: Counter[str] = Counter()
    try:  # a child may have left a FIFO or a symlink there: never blocked on, never followed
        with os.fdopen(fsafe.open_path(path, os.O_RDONLY), "rb") as handle:
            for line in handle:
                try:
                    kind = jsondepth.loads(line).get("type")
                except (ValueError, AttributeError):
                    continue
                counts[str(kind)] += 1
    except OSError:
        pass
    return dict(counts)


def _decisions(run_id: str) -> list[dict[str, Any]]:
    """The run's approval decisions as its inbox recorded them (SQLite), oldest first."""
    from tether import jsondepth
    from tether.inbox.store import open_store

    found = []
    try:
        with open_store() as store:
            rows = store.of_type(run_id, "approval_decision")
    except Exception:  # noqa: BLE001 (a broken store must not hide the rest)
        return []
    for row in rows:
        with contextlib.suppress(ValueError):
            body = jsondepth.loads(row.body or "{}")
            if isinstance(body, dict):
                found.append(body)
    return found


def _denial(decision: dict[str, Any]) -> str:
    """One denied call: ``bash: touch x (denied by rule shell:touch*)``."""
    what = f"{decision.get('tool', '?')}: {_one_line(str(decision.get('summary', '')), 120)}"
    by = str(decision.get("by", "?"))
    why = {"rule": f"rule {decision.get('rule')}", "no-one": "no one to ask"}.get(by, by)
    text = decision.get("text")
    if isinstance(text, str) and text and by != "rule":
        why += f": {_one_line(text, 120)}"
    return f"{what} (denied by {why})"


def _children(run_id: str) -> list[str]:
    from tether.store.index import RunIndex

    try:
        return [f"{c.id} ({c.status})" for c in RunIndex().children(run_id)]
    except Exception:  # noqa: BLE001
        return []


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


# -- tether replay ------------------------------------------------------------------------


def _replay(args: argparse.Namespace) -> int:
    record, path, problem = find_run(args.run)
    if path is None:
        print(f"tether replay: {problem}", file=sys.stderr)
        return exits.USAGE
    from tether.display import open_display

    display = open_display(args.output, stdout=sys.stdout, stderr=sys.stderr)
    try:
        replay(record, path, display)
    finally:
        display.close()
    return 0


def replay(record: RunRecord | None, path: Path, display: Any) -> str:
    """Feed a recorded run to ``display`` exactly as ``tether run`` did; returns its status."""
    from tether.cli.run import DisplayFeed
    from tether.runtime.parent.mirror import RunMirror
    from tether.runtime.parent.replay import end_from_log, read_log
    from tether.runtime.parent.rundir import RunDir

    run_id = record.id if record is not None else path.name
    run = RunDir(run_id, path)
    presenter = DisplayFeed(display)
    mirror = RunMirror(run_id)
    for update in read_log(run.events, run_id, mirror, controls=run.control):
        presenter.update(update)
    end = end_from_log(run, mirror)
    if record is not None and record.ended_at is not None:
        presenter.end(
            status=record.status,
            final_text=end.final_text,
            usage=record.usage,
            truncated=record.truncated,
            elapsed_s=record.elapsed_s or 0.0,
            error=record.error,
            stop_reason=end.stop_reason,
        )
        return record.status
    presenter.end(
        status=end.status,
        final_text=end.final_text,
        usage=end.usage,
        truncated=end.truncated,
        elapsed_s=0.0,
        error=end.error,
        stop_reason=end.stop_reason,
    )
    return end.status
