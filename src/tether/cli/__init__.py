"""The ``tether`` command.

Theory of operation: start-up must stay fast (``tether child`` has to reach
``ready`` quickly), so the top level imports nothing heavy. It picks the
subcommand from ``argv[1]``, imports only that subcommand's module, and lets the
module build its own parser. Each module exposes ``main(argv, prog) -> int``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Final

# name -> (module, one-line help). The order is the order of ``tether --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("tether.cli.run", "start a child agent on a task and show it live"),
    "demo": ("tether.cli.demo", "three scripted children showing the whole protocol"),
    "child": ("tether.cli.child", "run as a live wire child (the child presenter)"),
    "runs": ("tether.cli.history", "list recorded runs"),
    "show": ("tether.cli.history", "summarise one recorded run"),
    "replay": ("tether.cli.history", "render a recorded run through the display"),
    "display": ("tether.cli.display", "render a resp, wire or stream-json stream"),
    "inbox": ("tether.cli.inbox", "read or drain a run's inbox"),
    "daemon": ("tether.cli.daemon", "run or control the tether daemon"),
    "agent": ("tether.cli.agent", "talk to agents supervised by the daemon"),
    "agents": ("tether.cli.agents", "the agent CLIs tether can run and their controls"),
    "model-server": ("tether.cli.model_server", "serve scripted replies as provider APIs"),
    "channel": ("tether.cli.channel", "register and push to daemon channels"),
    "mcp-channel": ("tether.cli.mcp_channel", "the MCP channel server for a Claude Code session"),
    "dashboard": ("tether.cli.dashboard", "the fleet in a local web page (token, loopback)"),
    "wire": ("tether.cli.wire", "validate wire lines and print the state table"),
    "shell-lib": ("tether.cli.shell_lib", "print the path of the bash helper library"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: tether COMMAND [ARGS...]", "", "commands:"]
    for name, (_, help_text) in COMMANDS.items():
        lines.append(f"  {name.ljust(width)}  {help_text}")
    lines += ["", "Run 'tether COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from tether import __version__

        print(f"tether {__version__}")
        return 0
    name = args[0]
    entry = COMMANDS.get(name)
    if entry is None:
        print(f"tether: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(entry[0])
    except ModuleNotFoundError as exc:
        if exc.name != entry[0]:
            raise
        print(f"tether: the {name!r} command is not available in this build", file=sys.stderr)
        return 2
    result: int = module.main(args[1:], prog=f"tether {name}")
    return result


EXIT_STOPPED: Final = 3
"""Ctrl-C, or a reader of the output that went away (``tether runs | head``): the exit
status is 3, cancelled, as for a run; tether exits only with 0, 2, 3, 4 or 5, never
with a shell's 128+N (130, 141)."""


def entrypoint() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away: stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_STOPPED
    except KeyboardInterrupt:
        code = EXIT_STOPPED
    sys.exit(code)
