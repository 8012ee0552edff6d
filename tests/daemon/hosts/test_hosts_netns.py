"""Hosts in network namespaces: each daemon reaches NATS over a veth pair, not loopback.

Two namespaces (one per host, made with iproute2's ``ip netns`` and a veth pair each to
the test's namespace, where ``nats-server`` listens); the operator's CLI runs in host A's
namespace and drives an agent on host B. Needs root: as another user the test skips
with the reason, except with ``CI=true`` (CI runs as root), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_hosts import _wait_listed
from tests.nats_server import run_nats_server
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess, make_env


@dataclass(frozen=True)
class Namespace:
    name: str
    address: str  # this namespace's end of its veth pair
    gateway: str  # the test's end, where NATS is reached

    def wrap(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"network namespaces are required in CI: {reason}")
    pytest.skip(f"no network namespaces here: {reason}")


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture
def namespaces() -> Iterator[dict[str, Namespace]]:
    if os.geteuid() != 0:
        _unavailable("they need root (ip netns add)")
    if shutil.which("ip") is None:
        _unavailable("iproute2's ip is not installed (.ci/setup installs it)")
    tag = f"{os.getpid() % 100000}"
    subnet = 100 + os.getpid() % 150  # 10.<subnet>.{1,2}.0/30, unlikely to be in use
    made: dict[str, Namespace] = {}
    try:
        for index, host in enumerate("AB", start=1):
            ns = Namespace(f"tth{tag}{host}", f"10.{subnet}.{index}.2", f"10.{subnet}.{index}.1")
            outside, inside = f"tth{tag}{host}o", f"tth{tag}{host}i"
            _ip("netns", "add", ns.name)
            made[host] = ns
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", ns.name)
            _ip("addr", "add", f"{ns.gateway}/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", ns.name, "addr", "add", f"{ns.address}/30", "dev", inside)
            _ip("-n", ns.name, "link", "set", inside, "up")
            _ip("-n", ns.name, "link", "set", "lo", "up")
    except RuntimeError as error:
        for ns in made.values():
            subprocess.run(["ip", "netns", "del", ns.name], check=False)
        _unavailable(str(error))
    try:
        yield made
    finally:
        for ns in made.values():  # deleting a namespace deletes its veth pair too
            subprocess.run(["ip", "netns", "del", ns.name], check=False)


def tether_in(ns: Namespace, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ns.wrap(), sys.executable, "-m", "tether", "agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_hosts_in_network_namespaces_reach_nats_over_veth(
    namespaces: dict[str, Namespace], tmp_path: Path
) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "from B"}, {"text": "second"}]))
    roots = [Path(tempfile.mkdtemp(dir="/tmp", prefix=f"tn{h}")) for h in "AB"]
    daemons: dict[str, DaemonProcess] = {}
    try:
        with run_nats_server(tmp_path / "js", address="0.0.0.0") as server:
            for host, root in zip("AB", roots, strict=True):
                ns = namespaces[host]
                env = make_env(root)
                env["TETHER_NATS_URL"] = f"nats://{ns.gateway}:{server.port}"
                daemon = DaemonProcess(root, Path(env["TETHER_SOCKET"]), env, wrapper=ns.wrap())
                daemons[host] = daemon.start("--nats", env["TETHER_NATS_URL"], "--host", host)
            a, env_a = namespaces["A"], daemons["A"].env
            spawned = tether_in(
                a, env_a, "--host", "B", "spawn", "n1", "--task", "hi", "--script", str(script),
                "--wait",
            )  # fmt: skip
            assert (spawned.returncode, spawned.stdout) == (0, "from B\n"), spawned.stderr
            asked = tether_in(a, env_a, "--host", "B", "ask", "n1", "again")
            assert (asked.returncode, asked.stdout) == (0, "second\n"), asked.stderr
            tether_in(a, env_a, "--host", "B", "stop", "n1", "--mode", "close")
            followed = tether_in(
                a, env_a, "--host", "B", "events", "n1", "--after-seq", "0", "--follow", "--json"
            )
            assert followed.returncode == 0, followed.stderr
            assert json.loads(followed.stdout.splitlines()[-1])["type"] == "exit"
            _wait_listed(env_a, {("B", "n1")})
            for host, ns in namespaces.items():  # each daemon's NATS connection is its veth
                sockets = subprocess.run(
                    [*ns.wrap(), "ss", "-Htn", "state", "established"],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                assert f"{ns.address}:" in sockets, (host, sockets)
                assert f"{ns.gateway}:{server.port}" in sockets, (host, sockets)
                assert "127.0.0.1" not in sockets, (host, sockets)
    finally:
        for daemon in daemons.values():
            daemon.stop(signal.SIGKILL)
            kill_agents(Path(daemon.env["TETHER_HOME"]))
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
