"""``tether agent``'s command line: its parser, and the two reorderings its arguments
need before parsing (``-- ARGV`` for spawn, ``--approve/--deny`` after an answer's text)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tether.numbers import SECONDS, SECONDS_OR_ZERO, count

__all__ = ["EPILOG", "answer_flags_last", "build_parser", "split_child_argv"]


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


def build_parser(prog: str) -> argparse.ArgumentParser:
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
    add_spawn_agent_flags(spawn)
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
    approval_actions(action)
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
    answer_args(action("answer", "answer a clarification or approval request in its inbox"))
    return parser


def add_spawn_agent_flags(spawn: argparse.ArgumentParser) -> None:
    """``--agent NAME [--agent-arg ARG]...``, the worktree and base-URL flags, and how
    the agent's approvals are decided."""
    from tether.cli.child import add_agent_flags, add_approval_flags
    from tether.cli.run import add_workspace_flags

    add_agent_flags(spawn)
    add_workspace_flags(spawn, resume=False)
    add_approval_flags(spawn, child=False)


def approval_actions(action: Callable[..., argparse.ArgumentParser]) -> None:
    """``approvals``, ``queue`` and ``unqueue``."""
    action("approvals", "list the approvals that wait, fleet-wide, oldest first", agent=False)
    action("queue", "list the steers and follow-ups the agent has not taken in yet")
    unqueue = action("unqueue", "withdraw a queued steer or follow-up before it is taken in")
    unqueue.add_argument("ref", type=count(1), help="its seq (tether agent queue shows it)")


def answer_args(answer: argparse.ArgumentParser) -> None:
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


def split_child_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``spawn ... -- PROGRAM ARGS`` -> (the CLI's argv, the child's argv)."""
    if "spawn" in argv and "--" in argv and argv.index("spawn") < argv.index("--"):
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, None


ANSWER_FLAGS: Final = ("--approve", "--deny", "--always")


def answer_flags_last(argv: list[str]) -> list[str]:
    """``answer NAME KEY --deny TEXT``: the verdict flags moved after the text (argparse
    takes an optional positional only before them), so TEXT may come on either side."""
    if "answer" not in argv:
        return argv
    flags = [a for a in argv if a in ANSWER_FLAGS]
    return [a for a in argv if a not in ANSWER_FLAGS] + flags
