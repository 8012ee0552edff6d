"""``tether channel``: register a channel and print its deliveries, push to one, unregister.

    tether channel register [--session-id ID] [--name NAME]
        Stays connected. Prints {"channel_id": ...} first, then one JSON line per delivery
        ({"channel_id", "envelope"}), answering each. The channel stays after it disconnects.
    tether channel push CHANNEL_ID [ENVELOPE_JSON | --content TEXT [--meta k=v ...]] [--json]
        Exit 0 when delivered, 1 when routed but not delivered.
    tether channel unregister CHANNEL_ID [--json]

Errors exit with the ErrorCode's exit status (channel_unknown is 2, see tether.exits); no
daemon is 3; a push routed but not delivered is 4.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tether import exits

if TYPE_CHECKING:
    from tether.daemon.rpc.client import DaemonClient
    from tether.daemon.rpc.protocol import Request


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Daemon channels (MCP notifications).")
    parser.add_argument("--socket", type=Path, help="daemon socket (default: $TETHER_SOCKET ...)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    register = sub.add_parser("register", help="register a channel and print its deliveries")
    register.add_argument("--session-id", help="session id (default: a new random one)")
    register.add_argument("--name", help="a label for the channel")
    push = sub.add_parser("push", help="push an MCP channel notification to a channel")
    push.add_argument("channel_id")
    push.add_argument("envelope", nargs="?", help="the whole envelope as JSON")
    push.add_argument("--content", help="build the envelope from this text")
    push.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    push.add_argument("--json", action="store_true", help="print the result as JSON")
    unregister = sub.add_parser("unregister", help="remove a channel")
    unregister.add_argument("channel_id")
    unregister.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def main(argv: list[str], prog: str) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    from tether.daemon.rpc.client import DaemonClient, DaemonClientError

    try:
        with DaemonClient.connect(args.socket) as client:
            if args.action == "register":
                return _register(client, args)
            if args.action == "push":
                envelope = _envelope(parser, args)
                return _push(client, args, envelope)
            return _unregister(client, args)
    except DaemonClientError as exc:
        print(f"tether channel: {exc}", file=sys.stderr)
        return exc.exit_code
    except msgspec.ValidationError as exc:  # the daemon answered something else
        print(f"tether channel: unexpected reply from the daemon: {exc}", file=sys.stderr)
        return exits.FAILED


def _envelope(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    from tether import jsondepth
    from tether.daemon.channels.hub import make_channel_envelope

    if (args.envelope is None) == (args.content is None):
        parser.error("give exactly one of ENVELOPE_JSON or --content")
    if args.content is None:
        if args.meta:
            parser.error("--meta goes with --content")
        try:
            return jsondepth.loads(args.envelope)
        except ValueError as exc:
            parser.error(f"ENVELOPE_JSON is not JSON: {exc}")
    meta: dict[str, str] = {}
    for item in args.meta:
        key, eq, value = item.partition("=")
        if not eq:
            parser.error(f"--meta {item!r} is not KEY=VALUE")
        meta[key] = value
    try:
        return make_channel_envelope(args.content, meta)
    except ValueError as exc:
        parser.error(str(exc))


def _push(client: DaemonClient, args: argparse.Namespace, envelope: Any) -> int:
    from tether.daemon.channels.hub import PushResult

    params = {"channel_id": args.channel_id, "envelope": envelope}
    result = client.call_as("channel.push_to_channel", params, PushResult)
    delivered = bool(result.delivered)
    if args.json:
        print(msgspec.json.encode(result).decode())
    elif delivered:
        print(f"delivered to {args.channel_id}")
    else:
        print(f"routed to {args.channel_id} but not delivered: {result.reason}")
    return exits.OK if delivered else exits.FAILED


def _unregister(client: DaemonClient, args: argparse.Namespace) -> int:
    from tether.daemon.channels.hub import UnregisterReply

    params = {"channel_id": args.channel_id}
    result = client.call_as("channel.unregister_channel", params, UnregisterReply)
    print(msgspec.json.encode(result).decode() if args.json else f"unregistered {args.channel_id}")
    return 0


def _register(client: DaemonClient, args: argparse.Namespace) -> int:
    from tether.daemon.rpc.client import DaemonCallError, DaemonConnectionLost
    from tether.daemon.rpc.protocol import ErrorCode

    session_id = args.session_id or uuid.uuid4().hex
    params: dict[str, Any] = {"session_id": session_id}
    if args.name:
        params["name"] = args.name
    from tether.daemon.channels.hub import RegisterReply

    result = client.call_as("channel.register_channel", params, RegisterReply)
    _print_line({"channel_id": result.channel_id, "session_id": session_id})

    def on_request(request: Request) -> Any:
        if request.method != "channel.deliver":
            raise DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"no {request.method} here")
        _print_line(request.params)
        return {"received": True}

    client.on_request = on_request
    client.settimeout(None)
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        client.serve_forever()
    except KeyboardInterrupt:
        return 0
    except DaemonConnectionLost as exc:
        print(f"tether channel: {exc}; the channel is gone", file=sys.stderr)
        return exc.exit_code
    return 0


def _print_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def _exit_quietly(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
