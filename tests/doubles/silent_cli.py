"""TEST DOUBLE: an agent CLI that never answers (not a real agent CLI).

It reads its stdin to the end (so a hand-shake written to it is taken, never refused)
and writes nothing to stdout: an ``initialize`` (Claude Code's control request, Codex's
or ACP's JSON-RPC) or any other command waits forever. With ``--ignore-term`` it also
ignores SIGTERM, so only SIGKILL ends it. With ``--pid-file PATH`` it writes its pid
there first (the test checks that it did not outlive the run), with ``--env-file PATH``
the names of its environment variables, one a line.

    python silent_cli.py [--ignore-term] [--pid-file PATH] [--env-file PATH] [ARGS...]
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    if "--ignore-term" in argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--pid-file" in argv:
        path = argv[argv.index("--pid-file") + 1]
        with open(path, "w", encoding="ascii") as handle:
            handle.write(f"{os.getpid()}\n")
    if "--env-file" in argv:
        path = argv[argv.index("--env-file") + 1]
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{name}\n" for name in sorted(os.environ)))
    while os.read(0, 65536):
        pass
    signal.pause()  # stdin's EOF does not end it either (like claude-code-acp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
