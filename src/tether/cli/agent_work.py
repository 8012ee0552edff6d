"""``tether agent rm|diff|merge|fork``: remove an agent and its worktree, review its work,
take it into the base branch, or start a new agent from its conversation (see
:mod:`tether.daemon.fleet.workspaces`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from tether.daemon.fleet.replies import AgentStatus
from tether.daemon.fleet.workspaces import DiffReply, MergeReply

Action = Callable[..., argparse.ArgumentParser]


def add_work_actions(action: Action) -> None:
    """``rm`` and the three subcommands, added with ``tether agent``'s ``action`` helper."""
    rm = action("rm", "forget an ended agent and remove its worktree (its run directory stays)")
    rm.add_argument(
        "--force", action="store_true", help="kill a live agent first; drop unmerged work"
    )
    rm.add_argument(
        "--keep-branch", action="store_true", help="keep its worktree's branch, work committed"
    )
    diff = action("diff", "the agent's changes against its base (committed or not)")
    diff.add_argument("--stat", action="store_true", help="a diffstat instead of the patch")
    merge = action("merge", "commit the agent's work and merge it into its base branch")
    merge.add_argument("--squash", action="store_true", help="as one commit on the base")
    merge.add_argument("--message", "-m", help="the merge commit's message")
    fork = action("fork", "a new agent NEW that starts from NAME's conversation (and work)")
    fork.add_argument("new", metavar="NEW", help="the new agent's name")
    fork.add_argument("--task", help="the new agent's first prompt")


def work_action(client: Any, args: argparse.Namespace, call: Any, emit: Any) -> int:
    """Run ``diff``, ``merge`` or ``fork`` through ``call`` and print with ``emit``."""
    if args.action == "diff":
        params: dict[str, Any] = {"name": args.name, "stat": args.stat}
        result, found = call(client, "agent.diff", params, DiffReply)
        if args.json:
            emit(args, result, "")
        else:
            sys.stdout.write(found.text)  # the patch as git wrote it, for a pager or a file
        return 0
    if args.action == "merge":
        params = {"name": args.name, "squash": args.squash}
        if args.message is not None:
            params["message"] = args.message
        result, merged = call(client, "agent.merge", params, MergeReply)
        emit(args, result, _merged_text(merged))
        return 0
    params = {"name": args.name, "new": args.new}
    if args.task is not None:
        params["task"] = args.task
    client.settimeout(None)  # a fork starts an agent: bounded by the daemon
    result, status = call(client, "agent.fork", params, AgentStatus)
    emit(args, result, f"forked {args.name} as {status.name} (run {status.run_id}): {status.state}")
    return 0


def _merged_text(merged: MergeReply) -> str:
    if not merged.commit:
        return f"{merged.branch}: nothing to merge into {merged.base}"
    where = f" (checkout {merged.checkout} updated)" if merged.checkout else ""
    how = "squashed into" if merged.squash else "merged into"
    return (
        f"{merged.branch} {how} {merged.base}: {merged.commit[:12]}, "
        f"{len(merged.files)} file(s){where}"
    )
