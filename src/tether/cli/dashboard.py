"""``tether dashboard [--port N] [--open] [--listen ADDR]``: the fleet in a web page.

Prints ``http://127.0.0.1:PORT/?token=...`` (a fresh secret each start) and serves until
Ctrl-C. The page shows every agent of the daemon live; see :mod:`tether.web.app`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tether.numbers import PORT


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Serve the fleet dashboard.")
    parser.add_argument("--port", type=PORT, default=0, help="TCP port (default: any free one)")
    parser.add_argument("--open", action="store_true", help="open the URL in a browser")
    parser.add_argument(
        "--listen",
        metavar="ADDR",
        help="listen on ADDR instead of 127.0.0.1 (anyone who can reach it and has the "
        "token can drive your agents)",
    )
    parser.add_argument("--socket", type=Path, help="daemon socket (default: $TETHER_SOCKET ...)")
    parser.add_argument(
        "--max-connections",
        type=_positive,
        default=None,
        metavar="N",
        help="connections served at once; more are answered 503 (default: 128)",
    )
    args = parser.parse_args(argv)
    from tether import paths
    from tether.daemon.rpc.lifecycle import probe
    from tether.web.server import MAX_CONNECTIONS, serve

    socket_path = args.socket or paths.socket_path()
    if not probe(socket_path):
        print(
            f"tether dashboard: no daemon answers at {socket_path}; start it with "
            "'tether daemon start'",
            file=sys.stderr,
        )
        return 3
    try:
        asyncio.run(
            serve(
                socket_path,
                port=args.port,
                listen=args.listen,
                open_browser=args.open,
                max_connections=args.max_connections or MAX_CONNECTIONS,
            )
        )
    except OSError as exc:
        print(f"tether dashboard: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
