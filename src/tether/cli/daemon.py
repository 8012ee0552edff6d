"""``tether daemon``: run the daemon in the foreground, or start/stop/inspect a detached one.

tether daemon --foreground [--max-connections N] ...
tether daemon [--max-running N] [--notify CMD] [--policy FILE] start [--json]
                                  detach, wait until the socket answers
tether daemon stop [--json] [--force]
tether daemon status [--json]     exit 0 when running, 3 when not
tether daemon --nats URL [--replicas N] init-cluster [--json]
                                  create the cluster's stream and buckets, once

Exit statuses (:mod:`tether.exits`): 0 ok; 2 bad arguments, or a daemon that cannot
start (an unsafe socket directory, another daemon holding the lock); 3 not running
(``status``), or stopped by a signal; 5 ``stop`` timed out (retry with ``--force``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import exits
from tether.numbers import REPLICAS, SECONDS, SECONDS_OR_ZERO, count, from_env

if TYPE_CHECKING:
    from tether.daemon.hosts.names import ClusterOptions


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Run or control the tether daemon.")
    parser.add_argument(
        "--foreground", action="store_true", help="run here until SIGTERM, SIGINT or SIGHUP"
    )
    parser.add_argument(
        "--socket",
        type=Path,
        help="socket path (default: $TETHER_SOCKET or $XDG_RUNTIME_DIR/tether/daemon.sock)",
    )
    parser.add_argument(
        "--notify",
        metavar="CMD",
        help="run CMD (a shell command) each time an agent starts waiting on a person: "
        "the request as JSON on its stdin",
    )
    cluster = parser.add_argument_group("a cluster of hosts over NATS JetStream")
    cluster.add_argument("--nats", metavar="URL", help="join the cluster ($TETHER_NATS_URL)")
    cluster.add_argument("--host", help="this host's name in it ($TETHER_HOST; default: hostname)")
    cluster.add_argument(
        "--replicas",
        type=REPLICAS,
        help="replicas of the streams and buckets ($TETHER_NATS_REPLICAS)",
    )
    cluster.add_argument("--nats-creds", metavar="FILE", help="this host's NATS credentials")
    cluster.add_argument("--nats-ca", metavar="FILE", help="CA of the servers' TLS certificates")
    fleet = parser.add_argument_group("the agents")
    fleet.add_argument(
        "--max-running",
        type=count(),
        metavar="N",
        help="run at most N wire agents at once; spawns beyond wait as queued, in order",
    )
    fleet.add_argument(
        "--policy",
        metavar="FILE",
        help="the approval policy (a TOML file: approve = [...], deny = [...]) of every "
        "wire agent whose spawn names none of its own; its --approve/--deny rules add to it",
    )
    tuning = parser.add_argument_group("foreground tuning")
    tuning.add_argument("--max-connections", type=count(), default=512)
    tuning.add_argument("--max-in-flight", type=count(), default=4096)
    tuning.add_argument("--max-in-flight-per-connection", type=count(), default=256)
    tuning.add_argument(
        "--frame-timeout",
        type=SECONDS,
        default=30.0,
        metavar="SECONDS",
        help="close a connection whose frame is not complete in time",
    )
    tuning.add_argument(
        "--deliver-timeout",
        type=SECONDS,
        default=10.0,
        metavar="SECONDS",
        help="how long a channel may take to answer a delivery",
    )
    tuning.add_argument("--no-uvloop", action="store_true", help="use the stock asyncio loop")
    tuning.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (
        ("start", "start a detached daemon and wait until it answers"),
        ("stop", "stop the running daemon (SIGTERM)"),
        ("status", "report whether a daemon is running"),
        ("init-cluster", "create the cluster's stream and buckets (operator's credentials)"),
    ):
        action = sub.add_parser(name, help=text, description=text)
        action.add_argument("--json", action="store_true", help="print JSON for scripts")
        action.add_argument("--timeout", type=SECONDS_OR_ZERO, default=10.0, metavar="SECONDS")
        if name == "stop":
            action.add_argument("--force", action="store_true", help="SIGKILL after the timeout")
    return parser


def main(argv: list[str], prog: str) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    from tether import paths

    socket_path: Path = args.socket or paths.socket_path()
    if args.foreground:
        if args.action:
            parser.error("--foreground cannot be combined with an action")
        return _foreground(args, socket_path)
    if args.action == "start":
        return _start(args, socket_path)
    if args.action == "stop":
        return _stop(args, socket_path)
    if args.action == "status":
        return _status(args, socket_path)
    if args.action == "init-cluster":
        return _init_cluster(args)
    parser.print_help(sys.stderr)
    return exits.USAGE


def _foreground(args: argparse.Namespace, socket_path: Path) -> int:
    import logging

    from tether.daemon.app import FleetOptions, run_daemon
    from tether.daemon.rpc.config import ServerConfig
    from tether.daemon.rpc.lifecycle import DaemonSetupError

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    config = ServerConfig(
        socket_path=socket_path,
        max_connections=args.max_connections,
        max_in_flight=args.max_in_flight,
        max_in_flight_per_connection=args.max_in_flight_per_connection,
        frame_timeout_s=args.frame_timeout,
        deliver_timeout_s=args.deliver_timeout,
    )
    try:
        cluster = _cluster(args)
        policy = _policy(args.policy)
        fleet = FleetOptions(max_running=args.max_running, notify=args.notify, policy=policy)
        return run_daemon(
            config, use_uvloop=not args.no_uvloop, cluster=cluster, fleet_options=fleet
        )
    except (DaemonSetupError, ValueError) as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return exits.USAGE


def _cluster(args: argparse.Namespace) -> ClusterOptions | None:
    from tether.daemon.hosts.names import ClusterOptions

    return ClusterOptions.from_env(
        os.environ,
        url=args.nats,
        host=args.host,
        replicas=args.replicas,
        creds=args.nats_creds,
        ca=args.nats_ca,
    )


def _init_cluster(args: argparse.Namespace) -> int:
    """Exit 0 once the stream and buckets exist; 2 without a URL; 4 when NATS refused."""
    import asyncio
    import os

    from tether.daemon.hosts.link import init_cluster
    from tether.transports.channel import TransportError
    from tether.transports.cluster import BadClusterURL, ClusterSettings

    url = args.nats or os.environ.get("TETHER_NATS_URL")
    if not url:
        print("tether daemon: init-cluster needs --nats URL or $TETHER_NATS_URL", file=sys.stderr)
        return exits.USAGE
    try:
        replicas = args.replicas or int(from_env(os.environ, "TETHER_NATS_REPLICAS", REPLICAS, 1))
    except ValueError as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return exits.USAGE
    settings = ClusterSettings.from_env(os.environ, creds=args.nats_creds, ca=args.nats_ca)
    try:
        names = asyncio.run(init_cluster(url, replicas=replicas, settings=settings))
    except BadClusterURL as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return exits.USAGE
    except TransportError as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return exits.FAILED
    _emit(args, {"streams": names, "replicas": replicas}, f"cluster ready: {', '.join(names)}")
    return 0


def _policy(path: str | None) -> str | None:
    """The daemon's default policy file as an absolute path, read and checked now (a file
    that is missing or does not hold is a usage error at start, not at each spawn);
    raises ValueError."""
    if path is None:
        return None
    from tether.errors import BadOptions
    from tether.runtime.parent.command import approval_args
    from tether.runtime.parent.options import SpawnOptions

    absolute = os.path.abspath(path)
    try:
        approval_args(SpawnOptions(policy=absolute))
    except BadOptions as exc:
        raise ValueError(f"--policy: {exc}") from None
    return absolute


def _daemon_flags(args: argparse.Namespace) -> list[str]:
    """The cluster's and the agents' flags again, for the detached daemon's command line."""
    pairs = {
        "--max-running": None if args.max_running is None else str(args.max_running),
        "--notify": args.notify,
        "--policy": _policy(args.policy),
        "--nats": args.nats,
        "--host": args.host,
        "--replicas": None if args.replicas is None else str(args.replicas),
        "--nats-creds": args.nats_creds,
        "--nats-ca": args.nats_ca,
    }
    return [part for flag, value in pairs.items() if value is not None for part in (flag, value)]


def _emit(args: argparse.Namespace, data: dict[str, Any], human: str) -> None:
    print(json.dumps(data) if args.json else human)


def _start(args: argparse.Namespace, socket_path: Path) -> int:
    from tether.daemon.rpc.lifecycle import DaemonSetupError, daemon_status, start_detached

    state = daemon_status(socket_path)
    if state.answering:
        data = {**state.as_dict(), "started": False}
        _emit(args, data, f"tether daemon already running (pid {state.pid}) on {socket_path}")
        return 0
    try:
        pid = start_detached(socket_path, timeout=args.timeout, extra=_daemon_flags(args))
    except (DaemonSetupError, ValueError) as exc:
        print(f"tether daemon: could not start: {exc}", file=sys.stderr)
        return exits.USAGE
    data = {
        "running": True,
        "answering": True,
        "pid": pid,
        "socket": str(socket_path),
        "started": True,
    }
    _emit(args, data, f"tether daemon started (pid {pid}) on {socket_path}")
    return 0


def _stop(args: argparse.Namespace, socket_path: Path) -> int:
    from tether.daemon.rpc.lifecycle import stop_daemon

    try:
        pid = stop_daemon(socket_path, timeout=args.timeout, force=args.force)
    except TimeoutError as exc:
        print(f"tether daemon: {exc}; retry with --force", file=sys.stderr)
        return exits.TIMED_OUT
    except PermissionError as exc:
        print(f"tether daemon: cannot signal the daemon: {exc}", file=sys.stderr)
        return exits.USAGE
    if pid is None:
        _emit(
            args,
            {"stopped": False, "pid": None, "socket": str(socket_path)},
            f"tether daemon is not running ({socket_path})",
        )
        return 0
    _emit(
        args,
        {"stopped": True, "pid": pid, "socket": str(socket_path)},
        f"tether daemon stopped (pid {pid})",
    )
    return 0


def _status(args: argparse.Namespace, socket_path: Path) -> int:
    import msgspec

    from tether.daemon.rpc.client import DaemonClient, DaemonClientError
    from tether.daemon.rpc.lifecycle import daemon_status
    from tether.daemon.rpc.status import ServerStatus

    state = daemon_status(socket_path)
    data: dict[str, Any] = state.as_dict()
    info: ServerStatus | None = None
    if state.answering:
        try:
            with DaemonClient.connect(socket_path, timeout=args.timeout) as client:
                info = client.call_as("daemon.status", None, ServerStatus)
        except (DaemonClientError, msgspec.ValidationError) as exc:
            data["error"] = str(exc)
        else:
            data["daemon"] = msgspec.to_builtins(info)
    if args.json:
        print(json.dumps(data))
    elif state.answering:
        print(f"tether daemon running (pid {state.pid}) on {socket_path}")
        if info is not None:
            print(
                f"  uptime {info.uptime_s:.0f}s, {info.connections} connection(s), "
                f"{info.in_flight} call(s) in flight, {info.channels} channel(s)"
            )
    elif state.running:
        print(f"tether daemon (pid {state.pid}) is running but not answering on {socket_path}")
    else:
        print(f"tether daemon is not running ({socket_path}); start it with 'tether daemon start'")
    return exits.OK if state.answering else exits.CANCELLED
