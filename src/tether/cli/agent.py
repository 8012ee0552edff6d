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
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
from msgspec import UNSET

from tether import exits
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
from tether.numbers import SECONDS, SECONDS_OR_ZERO, count

R = TypeVar("R")

if TYPE_CHECKING:
    from tether.daemon.hosts.remote import RemoteClient
    from tether.daemon.rpc.client import DaemonClient
    from tether.daemon.rpc.protocol import Request

CALL_TIMEOUT_S: Final = 60.0

EPILOG: Final = """\
exit status (only these; the daemon's error code is printed, and with --json it is
the "code" of {"error": {"code", "message"}} on stdout):
  0 ok
  2 bad arguments or input: invalid_params, unknown_method, malformed_frame,
    agent_not_found, agent_exists, invalid_status, channel_unknown; a daemon that cannot
    start or runs as another user
  3 no daemon is running; it shut down (shutting_down) or the connection was lost; Ctrl-C
  4 spawn_failed, busy, internal; the turn that ask (or spawn --wait) waited for failed
    (its error on stderr)
  5 lock_timeout; ask (or spawn --wait) timed out: the message was delivered and the
    turn goes on
(fno-agents' client exits 13/14/15/18/19/124 for these; tether keeps 0/2/3/4/5.)

events --follow prints the recorded events after --after-seq, then live ones until the
run ends; reconnecting with the last seq printed loses nothing and repeats nothing.
"""


def _parser(prog: str) -> argparse.ArgumentParser:
    from tether.daemon.pty.frames import MAX_SIZE, MIN_SIZE

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Agents supervised by the tether daemon.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--socket", type=Path, help="daemon socket (default: $TETHER_SOCKET ...)")
    parser.add_argument(
        "--host",
        help="spawn on this host of the local daemon's cluster (every other verb finds an "
        "agent on any host by its name); with --nats or $TETHER_NATS_URL: call that host "
        "directly, as the cluster's operator",
    )
    parser.add_argument(
        "--nats",
        metavar="URL",
        help="the cluster ($TETHER_NATS_URL), for --host and list without a local daemon",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, text: str, *, agent: bool = True) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=text, description=text)
        if agent:
            command.add_argument("name", help="the agent's name")
        command.add_argument("--json", action="store_true", help="print JSON for scripts")
        return command

    spawn = action("spawn", "start an agent (and the daemon, if needed); -- ARGV runs a program")
    spawn.add_argument("--task", help="the first prompt")
    spawn.add_argument("--provider", help="model provider of the built-in child")
    spawn.add_argument("--model", help="model name")
    spawn.add_argument("--script", help="replies for the scripted provider (a JSON list)")
    spawn.add_argument("--cwd", help="working directory (default: this one)")
    spawn.add_argument("--deadline", type=SECONDS, metavar="S", help="the run times out after S s")
    spawn.add_argument("--channel-id", help="push the agent's inbox messages to this channel")
    spawn.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    spawn.add_argument("--wait", action="store_true", help="wait for the task's answer")
    spawn.add_argument(
        "--close-when-idle",
        action="store_true",
        help="end the run once it has nothing left to do (its task answered); it stays "
        "resumable, and under the daemon's --max-running its place goes to the next",
    )
    spawn.add_argument(
        "--timeout", type=SECONDS_OR_ZERO, metavar="S", help="with --wait: wait at most S s"
    )
    spawn.add_argument(
        "--pty", action="store_true", help="run -- COMMAND on a pseudo-terminal (any program)"
    )
    spawn.add_argument(
        "--cols", type=count(MIN_SIZE, MAX_SIZE), help="with --pty: terminal columns (default 80)"
    )
    spawn.add_argument(
        "--rows", type=count(MIN_SIZE, MAX_SIZE), help="with --pty: terminal rows (default 24)"
    )
    _add_spawn_agent_flags(spawn)
    ask = action("ask", "send a message and print the answer of the turn that reads it")
    ask.add_argument("text")
    ask.add_argument("--timeout", type=SECONDS_OR_ZERO, metavar="S", help="wait at most S seconds")
    action("list", "list the agents", agent=False)
    action("status", "show one agent")
    stop = action("stop", "end an agent's run (close, finalize or cancel)")
    stop.add_argument("--mode", choices=("close", "finalize", "cancel"), default="close")
    stop.add_argument("--note", help="with --mode finalize: the note for the last turn")
    stop.add_argument(
        "--timeout", type=SECONDS_OR_ZERO, default=10.0, metavar="S", help="wait for the end"
    )
    from tether.cli.agent_work import add_work_actions

    add_work_actions(action)  # rm, diff, merge, fork
    action("reconcile", "re-adopt agents left by a previous daemon", agent=False)
    _approval_actions(action)
    events = action("events", "print an agent's events")
    events.add_argument("--after-seq", type=count(0), default=0, metavar="N")
    events.add_argument("--follow", "-f", action="store_true", help="then live until it ends")
    events.add_argument(
        "--limit", type=count(1, 10_000), default=1000, help="without --follow (max 10000)"
    )
    for name, text in (
        ("steer", "inject TEXT at the next turn boundary"),
        ("follow-up", "queue TEXT for after the current turn"),
    ):
        action(name, text).add_argument("text")
    finalize = action("finalize", "ask for one last tool-free turn and the result")
    finalize.add_argument("--note", help="the instruction for that turn")
    action("cancel", "abort the run now")
    action("attach", "drive a PTY agent's terminal (Ctrl-] detaches), or watch and steer")
    _answer_args(action("answer", "answer a clarification or approval request in its inbox"))
    return parser


def _add_spawn_agent_flags(spawn: argparse.ArgumentParser) -> None:
    """``--agent NAME [--agent-arg ARG]...``, the worktree and base-URL flags, and how
    the agent's approvals are decided."""
    from tether.cli.child import add_agent_flags, add_approval_flags
    from tether.cli.run import add_workspace_flags

    add_agent_flags(spawn)
    add_workspace_flags(spawn, resume=False)
    add_approval_flags(spawn, child=False)


def _approval_actions(action: Callable[..., argparse.ArgumentParser]) -> None:
    """``approvals``, ``queue`` and ``unqueue``."""
    action("approvals", "list the approvals that wait, fleet-wide, oldest first", agent=False)
    action("queue", "list the steers and follow-ups the agent has not taken in yet")
    unqueue = action("unqueue", "withdraw a queued steer or follow-up before it is taken in")
    unqueue.add_argument("ref", type=count(1), help="its seq (tether agent queue shows it)")


def _answer_args(answer: argparse.ArgumentParser) -> None:
    answer.add_argument("key", metavar="MSG_KEY", help="the question's key (agent list shows it)")
    answer.add_argument("text", nargs="?", default="", help="the answer (or a note)")
    verdict = answer.add_mutually_exclusive_group()
    verdict.add_argument("--approve", action="store_true", help="approve the request")
    verdict.add_argument("--deny", action="store_true", help="deny the request")
    answer.add_argument(
        "--always",
        action="store_true",
        help="the same answer for every call of this kind for the rest of the run",
    )


def _split_child_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``spawn ... -- PROGRAM ARGS`` -> (the CLI's argv, the child's argv)."""
    if "spawn" in argv and "--" in argv and argv.index("spawn") < argv.index("--"):
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, None


_ANSWER_FLAGS: Final = ("--approve", "--deny", "--always")


def _answer_flags_last(argv: list[str]) -> list[str]:
    """``answer NAME KEY --deny TEXT``: the verdict flags moved after the text (argparse
    takes an optional positional only before them), so TEXT may come on either side."""
    if "answer" not in argv:
        return argv
    flags = [a for a in argv if a in _ANSWER_FLAGS]
    return [a for a in argv if a not in _ANSWER_FLAGS] + flags


def main(argv: list[str], prog: str) -> int:
    from tether.cli.child import join_agent_args
    from tether.cli.run import workspace_problem

    own, child_argv = _split_child_argv(_answer_flags_last(list(argv)))
    parser = _parser(prog)
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
        print(_for_terminal(f"tether agent: {exc}"), file=sys.stderr)
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
    print(json.dumps(data) if args.json else _for_terminal(human))


def _for_terminal(text: str) -> str:
    """``text`` (an agent's words in it) without escape sequences or control characters."""
    from tether.display.sanitize import sanitize

    return sanitize(text)


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
            _emit(args, result, _table(listed.agents))
            return 0
        if args.action == "reconcile":
            result, report = _call(client, "agent.reconcile", None, ReconcileReport)
            _emit(args, result, _reconciled(report))
            return 0
        if args.action == "approvals":
            result, waiting = _call(client, "agent.approvals", None, ApprovalsReply)
            _emit(args, result, _approvals_text(waiting))
            return 0
        return _simple(client, args)


def _simple(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    name = args.name
    if args.action == "status":
        result, status = _call(client, "agent.status", {"name": name}, AgentStatus)
        _emit(args, result, _status_text(status))
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
        _emit(args, result, _queue_text(queue))
        return 0
    if args.action == "unqueue":
        params = {"name": name, "ref": args.ref}
        result, sent = _call(client, "agent.unqueue", params, ControlReply)
        if sent.ack == "rejected":
            message = f"tether agent: {name} did not withdraw {args.ref}: {sent.reason}"
            print(_for_terminal(message), file=sys.stderr)
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
            _for_terminal(f"tether agent: {name} rejected {args.action}: {sent.reason}"),
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


def _queue_text(reply: QueueReply) -> str:
    """One line per queued control: its seq, kind, text (first line), age."""
    if not reply.queue:
        return f"{reply.name}: nothing queued ({reply.state})"
    lines = [
        f"{item.ref:>6}  {item.kind:<9} {item.text.splitlines()[0] if item.text else ''}"
        f"  ({_age(item.at)})"
        for item in reply.queue
    ]
    return _for_terminal("\n".join(lines))


def _approvals_text(reply: ApprovalsReply) -> str:
    """One line per approval that waits: who, its key, the call, for how long."""
    if not reply.approvals:
        return "no approvals wait"
    lines = []
    for row in reply.approvals:
        what = f"{row.tool}: {row.summary}" if row.tool else row.reason
        where = f"{row.host}/" if row.host else ""
        lines.append(f"{where}{row.name}  {row.key}  {what}  ({_age(row.since)})")
    if reply.more:
        lines.append(f"(and {reply.more} more: answer these first)")
    if reply.unreachable:
        lines.append(f"(not answering: {', '.join(reply.unreachable)})")
    return _for_terminal("\n".join(lines))


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
        result = client.follow_events(args.name, args.after_seq, lambda e: _print_event(args, e))
    if not args.json:
        print(f"({args.name} {result['state']}; last seq {result['last_seq']})", file=sys.stderr)
    return 0


def _events_page(client: DaemonClient | RemoteClient, args: argparse.Namespace) -> int:
    params = {"name": args.name, "after_seq": args.after_seq, "limit": args.limit}
    result = client.call("agent.events", params)
    page = decode_reply(result, EventsReply)
    for event in page.events:
        _print_event(args, event)
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
            _print_event(args, event)
        sys.stdout.flush()
        return {}

    client.on_request = on_request
    client.settimeout(None)
    params = {"name": args.name, "after_seq": args.after_seq, "follow": True}
    return client.call("agent.events", params)


# -- rendering --------------------------------------------------------------------------------


def _print_event(args: argparse.Namespace, event: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(event))
        return
    kind = event.get("type", "?")
    if kind in ("assistant-text-delta", "assistant-thinking-delta"):
        return
    print(_for_terminal(f"{event.get('seq', 0):>6} {kind:<22} {_event_summary(event)}".rstrip()))


def _event_summary(event: dict[str, Any]) -> str:
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


def _usage_text(usage: Any) -> str:
    if not isinstance(usage, dict) or not usage:
        return "-"
    return f"{usage.get('input', 0)}/{usage.get('output', 0)}"


def _age(since: Any) -> str:
    if not isinstance(since, int | float):
        return "-"
    seconds = max(0, int(time.time() - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _table(agents: list[AgentStatus]) -> str:
    if not agents:
        return "no agents (start one with 'tether agent spawn NAME --task ...')"
    hosts = any(a.host is not UNSET for a in agents)
    header = ("HOST",) * hosts + ("NAME", "STATE", "TURN", "PID", "TOKENS IN/OUT", "AGE", "RUN")
    rows = [header] + [
        (
            *((str(a.host if a.host is not UNSET else "-"),) * hosts),
            a.name,
            _shown_state(a),
            str(a.turn),
            str(a.pid or "-"),
            _usage_text(a.usage),
            _age(a.created_at),
            a.run_id,
        )
        for a in agents
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines + _question_lines(agents))


def _shown_state(agent: AgentStatus) -> str:
    """``waiting`` for a run blocked on a person's answer, ``queued #N`` for one waiting
    for a place to run (--max-running), else its state."""
    if agent.waiting is not UNSET:
        return "waiting"
    if agent.queue_position is not UNSET:
        return f"queued #{agent.queue_position}"
    if agent.resumable is True:
        return f"{agent.state} (resumable)"
    return agent.state


def _question_lines(agents: list[AgentStatus]) -> list[str]:
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


def _status_text(status: AgentStatus) -> str:
    keys = ("name", "state", "turn", "pid", "run_id", "run_dir", "last_seq", "provider", "model")
    values = {key: getattr(status, key) for key in keys}
    values["state"] = _shown_state(status)
    lines = [f"{key + ':':<11}{'-' if value is None else value}" for key, value in values.items()]
    lines.append(f"{'usage:':<11}{_usage_text(status.usage)} (tokens in/out)")
    lines.append(f"{'started:':<11}{_age(status.started_at)} ago")
    if status.worktree is not UNSET:
        lines.append(f"{'worktree:':<11}{status.worktree}")
        lines.append(f"{'branch:':<11}{status.branch or '-'} (base {status.base or '-'})")
    if status.waiting is not UNSET:
        waiting = status.waiting
        what = f" {waiting.tool}" if waiting.tool else ""
        lines.append(
            f"{'waiting:':<11}{waiting.kind}{what} {waiting.key} since {_age(waiting.since)}"
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


def _reconciled(report: ReconcileReport) -> str:
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
