"""``tether agent``: long-lived agents supervised by the tether daemon.

    tether agent spawn NAME [--task T] [--agent A [--agent-arg ARG]...] [--provider P]
                            [--model M] [--script F] [--cwd D] [--base-url URL]
                            [--worktree [--base REF] [--branch B]] [--deadline S]
                            [--channel-id C] [--env K=V] [--wait] [--close-when-idle]
                            [approval flags] [-- ARGV...]
    tether agent spawn NAME --pty [--cols C] [--rows R] [--cwd D] [--env K=V] -- COMMAND...
    tether agent ask NAME TEXT [--timeout S]
    tether agent list | status NAME | reconcile
    tether agent stop NAME [--mode close|finalize|cancel] [--note N] [--timeout S]
    tether agent rm NAME [--force] [--keep-branch]
    tether agent diff NAME [--stat] | merge NAME [--squash] [--message M]
    tether agent fork NAME NEW [--task T]
    tether agent events NAME [--after-seq N] [--follow] [--limit N]
    tether agent steer|follow-up NAME TEXT | finalize NAME [--note N] | cancel NAME
                  (a follow-up to an agent whose run has ended resumes it: a new run)
    tether agent attach NAME      (a PTY agent's terminal; a wire agent's live view + steering)
    tether agent answer NAME MSG_KEY TEXT | --approve | --deny   (a question in its inbox)

Human output by default, ``--json`` for scripts (one JSON document; ``events --json``
prints one event per line). Human output carries an agent's text (its events, questions,
errors), so nothing a terminal would interpret reaches it (:mod:`tether.display.sanitize`);
``ask``'s answer is cleaned only for a terminal, as ``tether run``'s is. ``spawn`` starts the
daemon when none is running; the other actions say how to start it.

In a cluster of hosts the local daemon reaches every host's agents by name, so no verb
needs ``--host`` but a spawn elsewhere (``tether agent --host B spawn NAME``, started by B
through the local daemon). With ``--nats URL`` (or ``$TETHER_NATS_URL``), ``--host`` and
``list`` go to the cluster directly instead, as its operator (a machine with no daemon).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Final, TypeVar

from msgspec import UNSET

from tether import exits
from tether.cli.agent_args import answer_flags_last, build_parser, split_child_argv
from tether.cli.agent_text import (
    approvals_text,
    for_terminal,
    print_event,
    queue_text,
    reconciled,
    status_text,
    table,
)
from tether.daemon.fleet.replies import (
    AgentStatus,
    AnswerReply,
    ApprovalsReply,
    AskReply,
    ControlReply,
    EventsReply,
    ListReply,
    QueueReply,
    ReconcileReport,
    RmReply,
    StopReply,
    decode_reply,
)

R = TypeVar("R")

if TYPE_CHECKING:
    from tether.daemon.hosts.remote import RemoteClient
    from tether.daemon.rpc.client import DaemonClient
    from tether.daemon.rpc.protocol import Request

CALL_TIMEOUT_S: Final = 60.0


def main(argv: list[str], prog: str) -> int:
    from tether.cli.child import join_agent_args
    from tether.cli.run import workspace_problem

    own, child_argv = split_child_argv(answer_flags_last(list(argv)))
    parser = build_parser(prog)
    args = parser.parse_args(join_agent_args(own))
    if child_argv is not None and not child_argv:
        parser.error("-- must be followed by a program")
    if args.action == "spawn":
        problem = workspace_problem(args)
        if problem is not None:
            parser.error(problem)
    from tether.daemon.rpc.client import DaemonClientError

    try:
        if args.action == "spawn":
            return _spawn(args, child_argv)
        if args.action == "attach":
            from tether.cli.attach import attach

            return attach(args.socket, args.name)
        return _run(args)
    except DaemonClientError as exc:
        print(for_terminal(f"tether agent: {exc}"), file=sys.stderr)
        if args.json:
            print(json.dumps({"error": _error_json(exc)}))
        return exc.exit_code
    except KeyboardInterrupt:
        return exits.CANCELLED


def _error_json(exc: Exception) -> dict[str, str]:
    """The daemon's error code for scripts; ``unavailable``/``connection_lost``/... when
    the daemon never answered."""
    from tether.daemon.rpc.client import DaemonCallError

    if isinstance(exc, DaemonCallError):
        return {"code": exc.code.value, "message": exc.message}
    kind = type(exc).__name__.removeprefix("Daemon")
    code = "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")
    return {"code": code, "message": str(exc)}


def _cluster_url(args: argparse.Namespace) -> str | None:
    """The cluster's URL when this call goes to it directly, as its operator: ``--host``
    (or ``list``) with ``--nats`` or ``$TETHER_NATS_URL``. Otherwise the local daemon
    answers: in a cluster it reaches every host's agents itself, and ``--host`` is the
    host a spawn goes to."""
    nats_url: str | None = args.nats or os.environ.get("TETHER_NATS_URL")
    return nats_url if args.host is not None or args.action == "list" else None


def _connect(args: argparse.Namespace) -> DaemonClient | RemoteClient:
    """The local daemon, or the cluster directly (see :func:`_cluster_url`)."""
    nats_url = _cluster_url(args)
    if nats_url:
        from tether.daemon.hosts.remote import RemoteClient
        from tether.transports.cluster import BadClusterURL, ClusterSettings

        try:
            remote = RemoteClient(nats_url, args.host or "", ClusterSettings.from_env(os.environ))
        except BadClusterURL as exc:  # a usage error, said before anything connected
            print(f"tether agent: {exc}", file=sys.stderr)
            raise SystemExit(exits.USAGE) from None
        remote.settimeout(CALL_TIMEOUT_S)
        return remote
    from tether.daemon.rpc.client import DaemonClient

    client = DaemonClient.connect(args.socket)
    client.settimeout(CALL_TIMEOUT_S)
    return client


def _call(
    client: DaemonClient | RemoteClient, method: str, params: Any, kind: type[R]
) -> tuple[Any, R]:
    """The daemon's answer as it came (for --json) and as its reply Struct."""
    result = client.call(method, params)
    return result, decode_reply(result, kind)


def _emit(args: argparse.Namespace, data: Any, human: str) -> None:
    print(json.dumps(data) if args.json else for_terminal(human))


# -- actions --------------------------------------------------------------------------------


def _spawn(args: argparse.Namespace, child_argv: list[str] | None) -> int:
    from tether.daemon.rpc.lifecycle import DaemonSetupError, ensure_running

    if args.pty and not child_argv:  # usage errors before a daemon is started for them
        print(
            "tether agent: --pty needs a program: spawn NAME --pty -- COMMAND...", file=sys.stderr
        )
        return exits.USAGE
    params = _spawn_params(args, child_argv)
    if args.host is not None and not _cluster_url(args):
        params["host"] = args.host  # the local daemon starts it there
    try:
        if args.host is None:  # a remote host's daemon must already be in the cluster
            ensure_running(args.socket)
    except DaemonSetupError as exc:
        print(f"tether agent: could not start the daemon: {exc}", file=sys.stderr)
        return exits.USAGE
    with _connect(args) as client:
        client.settimeout(None)  # spawn waits for ready (bounded by the daemon)
        result, status = _call(client, "agent.spawn", params, AgentStatus)
    answer = None if status.answer is UNSET else status.answer
    where = f"pid {status.pid}, run {status.run_id}"
    human = f"spawned {status.name} ({where}): {status.state}"
    if status.queue_position is not UNSET:  # --max-running: no process, no run yet
        where = "queued"
        human = (
            f"spawned {status.name}: queued #{status.queue_position} "
            "(it starts when a running agent ends: the daemon's --max-running)"
        )
    if status.kind == "pty":
        human += f"; attach with 'tether agent attach {status.name}'"
    if answer is not None and not answer.timed_out:
        human = answer.text or ""
        print(f"spawned {status.name} ({where})", file=sys.stderr)
    _emit(args, result, human)
    return _answered(answer, status.name) if answer is not None else 0


def _spawn_params(args: argparse.Namespace, child_argv: list[str] | None) -> dict[str, Any]:
    env: dict[str, str] = {}
    for item in args.env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"tether agent: --env expects KEY=VALUE, got {item!r}")
        env[key] = value
    params: dict[str, Any] = {
        "name": args.name,
        "cwd": os.path.abspath(args.cwd or os.getcwd()),
        "wait": args.wait,
    }
    optional = {
        "task": args.task,
        "provider": args.provider,
        "model": args.model,
        "script": os.path.abspath(args.script) if args.script else None,
        "deadline_s": args.deadline,
        "channel_id": args.channel_id,
        "argv": child_argv,
        "env": env or None,
        "timeout_s": args.timeout,
        "pty": args.pty or None,
        "cols": args.cols,
        "rows": args.rows,
        "agent": args.agent or args.adapter,
        "agent_args": args.agent_arg or None,
        "base_url": args.base_url,
        "worktree": _worktree(args),
        "approval": args.approval,
        "approve": args.approve or None,
        "deny": args.deny or None,
        "policy": os.path.abspath(args.policy) if args.policy else None,
        "approval_timeout_s": args.approval_timeout,
        "approval_default": args.approval_default,
        "close_when_idle": args.close_when_idle or None,
    }
    params.update({key: value for key, value in optional.items() if value is not None})
    return params


def _worktree(args: argparse.Namespace) -> bool | dict[str, str] | None:
    """``agent.spawn``'s worktree for the flags (None without ``--worktree``)."""
    if not args.worktree:
        return None
    wanted = {key: value for key in ("base", "branch") if (value := getattr(args, key))}
    return wanted or True


def _run(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        if args.action == "ask":
            return _ask(client, args)
        if args.action == "events":
            return _events(client, args)
        if args.action == "list":
            result, listed = _call(client, "agent.list", None, ListReply)
            _emit(args, result, table(listed.agents))
            return 0
        if args.action == "reconcile":
            result, report = _call(client, "agent.reconcile", None, ReconcileReport)
            _emit(args, result, reconciled(report))
            return 0
        if args.action == "approvals":
            result, waiting = _call(client, "agent.approvals", None, ApprovalsReply)
            _emit(args, result, approvals_text(waiting))
            return 0
        return _simple(client, args)


def _simple(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    name = args.name
    if args.action == "status":
        result, status = _call(client, "agent.status", {"name": name}, AgentStatus)
        _emit(args, result, status_text(status))
        return 0
    if args.action == "stop":
        params: dict[str, Any] = {"name": name, "mode": args.mode, "timeout_s": args.timeout}
        if args.note is not None:
            params["note"] = args.note
        client.settimeout(args.timeout + CALL_TIMEOUT_S)
        result, stopped = _call(client, "agent.stop", params, StopReply)
        if stopped.already_exited is True:
            _emit(args, result, f"{name}: already ended ({stopped.state})")
            return 0
        ended = "ended" if stopped.ended is True else "still ending"
        _emit(args, result, f"{name}: {args.mode} {stopped.ack}; {stopped.state} ({ended})")
        return 0
    if args.action == "rm":
        params = {"name": name, "force": args.force, "keep_branch": args.keep_branch}
        result, removed = _call(client, "agent.rm", params, RmReply)
        _emit(args, result, f"removed {name} (its run directory stays: {removed.run_dir})")
        return 0
    if args.action in ("diff", "merge", "fork"):
        from tether.cli.agent_work import work_action

        return work_action(client, args, _call, _emit)
    if args.action == "answer":
        return _answer_question(client, args)
    if args.action == "queue":
        result, queue = _call(client, "agent.queue", {"name": name}, QueueReply)
        _emit(args, result, queue_text(queue))
        return 0
    if args.action == "unqueue":
        params = {"name": name, "ref": args.ref}
        result, sent = _call(client, "agent.unqueue", params, ControlReply)
        if sent.ack == "rejected":
            message = f"tether agent: {name} did not withdraw {args.ref}: {sent.reason}"
            print(for_terminal(message), file=sys.stderr)
            return exits.FAILED
        _emit(args, result, f"{name}: withdrew {args.ref} ({sent.ack}); {sent.state}")
        return 0
    method, params = _control(args)
    result, sent = _call(client, method, params, ControlReply)
    human = f"{name}: {args.action} {sent.ack} (seq {sent.seq}); {sent.state}"
    if sent.resumed is not UNSET:
        human = f"{name}: resumed from run {sent.resumed} with the follow-up; {sent.state}"
    if sent.ack == "rejected":
        print(
            for_terminal(f"tether agent: {name} rejected {args.action}: {sent.reason}"),
            file=sys.stderr,
        )
        return exits.FAILED
    _emit(args, result, human)
    return 0


def _answer_question(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"name": args.name, "key": args.key, "text": args.text}
    if args.always:
        params["scope"] = "always"
    if args.approve or args.deny:
        params["decision"] = "approve" if args.approve else "deny"
    elif not args.text:
        print("tether agent: answer needs TEXT, --approve or --deny", file=sys.stderr)
        return exits.USAGE
    result, answered = _call(client, "agent.answer", params, AnswerReply)
    human = (
        f"{args.name}: answered {args.key} ({answered.kind}) as {answered.sent_as} "
        f"{answered.ack} (seq {answered.seq}); {answered.state}"
    )
    _emit(args, result, human)
    return 0


def _control(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"name": args.name}
    if args.action in ("steer", "follow-up"):
        params["text"] = args.text
    if args.action == "finalize" and args.note is not None:
        params["note"] = args.note
    return "agent." + args.action.replace("-", "_"), params


def _ask(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"name": args.name, "text": args.text}
    if args.timeout is not None:
        params["timeout_s"] = args.timeout
    client.settimeout(None if args.timeout is None else args.timeout + CALL_TIMEOUT_S)
    result, asked = _call(client, "agent.ask", params, AskReply)
    answer = "" if asked.timed_out or asked.text is UNSET else asked.text
    if args.json or sys.stdout.isatty():
        _emit(args, result, answer)
    else:  # the answer itself, byte for byte, into a pipe or a file
        print(answer)
    return _answered(asked, args.name)


def _answered(asked: AskReply, name: str) -> int:
    """The exit status of an ask (or ``spawn --wait``): its turn failed, or the wait
    timed out, says so on stderr."""
    if asked.stop_reason == "error":
        why = asked.error if isinstance(asked.error, str) else "no error given"
        print(
            f"tether agent: {name}'s turn {asked.turn} failed: {why} "
            f"(see 'tether agent events {name}')",
            file=sys.stderr,
        )
        return exits.FAILED
    if not asked.timed_out:
        return 0
    print(
        f"tether agent: {name} is still on it (message seq {asked.seq}); follow it with "
        f"'tether agent events {name} --follow'",
        file=sys.stderr,
    )
    return exits.TIMED_OUT


def _events(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    from tether.daemon.rpc.client import DaemonClient

    if not args.follow:
        return _events_page(client, args)
    if isinstance(client, DaemonClient):
        result = _events_follow_local(client, args)
    else:  # another host's agent: its events channel in JetStream
        result = client.follow_events(args.name, args.after_seq, lambda e: print_event(args, e))
    if not args.json:
        print(f"({args.name} {result['state']}; last seq {result['last_seq']})", file=sys.stderr)
    return 0


def _events_page(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    params = {"name": args.name, "after_seq": args.after_seq, "limit": args.limit}
    result = client.call("agent.events", params)
    page = decode_reply(result, EventsReply)
    for event in page.events:
        print_event(args, event)
    if not args.json and page.more:
        print(f"(more: continue with --after-seq {page.last_seq})", file=sys.stderr)
    return 0


def _events_follow_local(client: DaemonClient, args: argparse.Namespace) -> Any:
    def on_request(request: Request) -> Any:
        from tether.daemon.rpc.client import DaemonCallError
        from tether.daemon.rpc.protocol import ErrorCode

        if request.method != "agent.event" or not isinstance(request.params, dict):
            raise DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"no {request.method} here")
        for event in request.params.get("events", []):
            print_event(args, event)
        sys.stdout.flush()
        return {}

    client.on_request = on_request
    client.settimeout(None)
    params = {"name": args.name, "after_seq": args.after_seq, "follow": True}
    return client.call("agent.events", params)
