"""``tether agent``'s human output: each reply as the lines a person reads. An agent's words
reach a terminal only through :func:`for_terminal` (:mod:`tether.display.sanitize`)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import msgspec
from msgspec import UNSET

from tether.daemon.fleet.replies import (
    AgentStatus,
    ApprovalsReply,
    QueueReply,
    ReconcileReport,
)

__all__ = [
    "age",
    "approvals_text",
    "for_terminal",
    "print_event",
    "queue_text",
    "reconciled",
    "status_text",
    "table",
]


def for_terminal(text: str) -> str:
    """``text`` (an agent's words in it) without escape sequences or control characters."""
    from tether.display.sanitize import sanitize

    return sanitize(text)


def queue_text(reply: QueueReply) -> str:
    """One line per queued control: its seq, kind, text (first line), age."""
    if not reply.queue:
        return f"{reply.name}: nothing queued ({reply.state})"
    lines = [
        f"{item.ref:>6}  {item.kind:<9} {item.text.splitlines()[0] if item.text else ''}"
        f"  ({age(item.at)})"
        for item in reply.queue
    ]
    return for_terminal("\n".join(lines))


def approvals_text(reply: ApprovalsReply) -> str:
    """One line per approval that waits: who, its key, the call, for how long."""
    if not reply.approvals:
        return "no approvals wait"
    lines = []
    for row in reply.approvals:
        what = f"{row.tool}: {row.summary}" if row.tool else row.reason
        where = f"{row.host}/" if row.host else ""
        lines.append(f"{where}{row.name}  {row.key}  {what}  ({age(row.since)})")
    if reply.more:
        lines.append(f"(and {reply.more} more: answer these first)")
    if reply.unreachable:
        lines.append(f"(not answering: {', '.join(reply.unreachable)})")
    return for_terminal("\n".join(lines))


def print_event(args: argparse.Namespace, event: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(event))
        return
    kind = event.get("type", "?")
    if kind in ("assistant-text-delta", "assistant-thinking-delta"):
        return
    print(for_terminal(f"{event.get('seq', 0):>6} {kind:<22} {event_summary(event)}".rstrip()))


def event_summary(event: dict[str, Any]) -> str:
    kind = event.get("type")
    if kind in ("turn-started", "turn-complete"):
        return f"turn {event.get('turn')} {event.get('stop-reason', '')}".strip()
    if kind == "control-ack":
        return (
            f"{event.get('status')} seq {event.get('ref', '?')} {event.get('reason', '')}".strip()
        )
    if kind == "exit":
        return f"{event.get('status')} {event.get('error', '')}".strip()
    text = event.get("summary") or event.get("text") or event.get("name") or ""
    return str(text).splitlines()[0][:100] if text else ""


def usage_text(usage: Any) -> str:
    if not isinstance(usage, dict) or not usage:
        return "-"
    return f"{usage.get('input', 0)}/{usage.get('output', 0)}"


def age(since: Any) -> str:
    if not isinstance(since, int | float):
        return "-"
    seconds = max(0, int(time.time() - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(agents: list[AgentStatus]) -> str:
    if not agents:
        return "no agents (start one with 'tether agent spawn NAME --task ...')"
    hosts = any(a.host is not UNSET for a in agents)
    header = ("HOST",) * hosts + ("NAME", "STATE", "TURN", "PID", "TOKENS IN/OUT", "AGE", "RUN")
    rows = [header] + [
        (
            *((str(a.host if a.host is not UNSET else "-"),) * hosts),
            a.name,
            shown_state(a),
            str(a.turn),
            str(a.pid or "-"),
            usage_text(a.usage),
            age(a.created_at),
            a.run_id,
        )
        for a in agents
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines + question_lines(agents))


def shown_state(agent: AgentStatus) -> str:
    """``waiting`` for a run blocked on a person's answer, ``queued #N`` for one waiting
    for a place to run (--max-running), else its state."""
    if agent.waiting is not UNSET:
        return "waiting"
    if agent.queue_position is not UNSET:
        return f"queued #{agent.queue_position}"
    if agent.resumable is True:
        return f"{agent.state} (resumable)"
    return agent.state


def question_lines(agents: list[AgentStatus]) -> list[str]:
    """Unanswered questions, one line each, with the command that answers them."""
    out = []
    for agent in agents:
        for question in agent.questions or []:
            kind = "approval" if question.type == "approval_request" else "question"
            text = question.text.replace("\n", " ")[:80]
            out.append(f"? {agent.name} {kind} {question.key}: {text}")
    if out:
        out.insert(0, "")
        out.append("(answer with: tether agent answer NAME MSG_KEY TEXT | --approve | --deny)")
    return out


def status_text(status: AgentStatus) -> str:
    keys = ("name", "state", "turn", "pid", "run_id", "run_dir", "last_seq", "provider", "model")
    values = {key: getattr(status, key) for key in keys}
    values["state"] = shown_state(status)
    lines = [f"{key + ':':<11}{'-' if value is None else value}" for key, value in values.items()]
    lines.append(f"{'usage:':<11}{usage_text(status.usage)} (tokens in/out)")
    lines.append(f"{'started:':<11}{age(status.started_at)} ago")
    if status.worktree is not UNSET:
        lines.append(f"{'worktree:':<11}{status.worktree}")
        lines.append(f"{'branch:':<11}{status.branch or '-'} (base {status.base or '-'})")
    if status.waiting is not UNSET:
        waiting = status.waiting
        what = f" {waiting.tool}" if waiting.tool else ""
        lines.append(
            f"{'waiting:':<11}{waiting.kind}{what} {waiting.key} since {age(waiting.since)}"
        )
    if status.channel_id:
        stats = "" if status.channel is UNSET else msgspec.json.encode(status.channel).decode()
        lines.append(f"{'channel:':<11}{status.channel_id} {stats}")
    if status.adopted:
        lines.append(f"{'adopted:':<11}yes (re-adopted after a daemon restart)")
    if status.error not in (None, UNSET):
        lines.append(f"{'error:':<11}{status.error}")
    for note in status.notes or []:
        lines.append(f"{'note:':<11}{note}")
    return "\n".join(lines)


def reconciled(report: ReconcileReport) -> str:
    def names(found: list[str]) -> str:
        return ", ".join(found) or "-"

    lines = [
        f"scanned {report.scanned} agents",
        f"recovered: {names(report.recovered)}",
        f"orphaned:  {names(report.orphaned)}",
        f"skipped:   {names(report.skipped)}",
    ]
    lines += [f"error:     {e.name}: {e.error}" for e in report.errors]
    return "\n".join(lines)
