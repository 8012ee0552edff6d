"""The ``tether`` command.

Theory of operation: start-up must stay fast (``tether child`` has to reach
``ready`` quickly), so the top level imports nothing heavy. It picks the
subcommand from ``argv[1]``, imports only that subcommand's module, and lets the
module build its own parser. Each module exposes ``main(argv, prog) -> int``.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc costs a few ms before the signal handlers are set
    from collections.abc import Sequence

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


def entrypoint() -> None:
    """``tether``: exit only with 0, 2, 3, 4 or 5 (:mod:`tether.exits`), never with a
    traceback, 1 or a shell's 128+N."""
    from tether import exits

    _stop_on_signals(record=sys.argv[1:2] == ["run"])
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`tether runs | head`): stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = exits.CANCELLED
    except SystemExit as exc:
        code = _system_exit(exc)
    except BaseException as exc:  # noqa: BLE001 - the one place that turns any error into a code
        code = exits.for_exception(exc)
        if code != exits.CANCELLED:
            _report(exc)
    _ignore_late_signals()
    sys.exit(code)


def _ignore_late_signals() -> None:
    """The exit code is decided: a signal while the interpreter shuts down must not turn
    it into 128+N. Shutting down restores the default action of every signal with a
    Python handler, which kills, but leaves an ignored one ignored."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP before a command installed its own handling: stop as for
    Ctrl-C (exit 3). A subclass of ``KeyboardInterrupt`` so that the cleanup each command
    does for Ctrl-C runs for these signals too."""


def _stop_on_signals(*, record: bool = False) -> None:
    """SIGTERM and SIGHUP stop a command as Ctrl-C does, by raising where it is.

    ``tether run`` instead records them, and Ctrl-C too, in ``exits.EARLY_SIGNALS``, and acts
    on them once its child has started and its own handling is in place: an exception
    raised wherever the signal lands could leave a half-started child behind, and one
    raised inside a native extension's callback (msgspec building a decoder at import
    time) has crashed the interpreter.
    """
    import signal

    from tether.exits import EARLY_SIGNALS

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(signal.Signals(signum).name)

    if record:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: EARLY_SIGNALS.append(signum))
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def _system_exit(exc: SystemExit) -> int:
    """``sys.exit(...)``/argparse inside a command: keep a contract code, print a message."""
    from tether import exits

    if exc.code is None:
        return exits.OK
    if isinstance(exc.code, int) and not isinstance(exc.code, bool):
        allowed = (exits.OK, exits.USAGE, exits.CANCELLED, exits.FAILED, exits.TIMED_OUT)
        return exc.code if exc.code in allowed else exits.FAILED
    print(exc.code, file=sys.stderr)
    return exits.USAGE


def _report(exc: BaseException) -> None:
    """One line on stderr; the traceback only with ``TETHER_DEBUG=1``."""
    import os

    from tether.errors import TetherError

    name = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else ""
    prefix = f"tether {name}".rstrip()
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        text = f"{exc.strerror}{where}"
    elif isinstance(exc, (TetherError, OSError)) or type(exc).__module__ == "sqlite3":
        text = str(exc) or type(exc).__name__
    else:
        text = f"internal error ({type(exc).__name__}: {exc}); TETHER_DEBUG=1 shows where"
    first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
    print(f"{prefix}: {first}", file=sys.stderr)
    if os.environ.get("TETHER_DEBUG"):
        import traceback

        traceback.print_exception(exc)
