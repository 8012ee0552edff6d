"""Running real agent CLIs in tests: finding them, a private HOME, wire checks, survivors.

A CLI is found in ``$TETHER_CI_CACHE/npm/node_modules/.bin`` (where ``.ci/setup``
installs the pinned npm packages), else on PATH. When it is missing the test FAILS under
``CI=true`` and is skipped otherwise, with a reason naming the package.

Every process a test starts carries ``TETHER_TEST_MARK=<uuid>`` in its environment, and
every process below it inherits it (the adapter child, the CLI, the CLI's tools), so
:func:`survivors` finds whatever outlived the run by reading ``/proc/*/environ``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waits import wait_gone
from tether.runtime.child.adapters.registry import AGENTS, search_path
from tether.wire.usage import add_usage

MARK = "TETHER_TEST_MARK"
CI_CACHE = "/var/cache/tether-ci"  # .ci/setup's default for $TETHER_CI_CACHE
Event = dict[str, Any]


def require_cli(agent: str) -> str:
    """The agent's program (a path); fails under CI, skips locally, when it is missing."""
    kind = AGENTS[agent]
    return require_program(kind.command[0], kind.package or "it")


def require_program(program: str, package: str) -> str:
    """``program``'s path: the pinned install first (a CLI on PATH may be another version:
    Claude Code's own auto-updater installs one globally when it is left on), then PATH;
    fails under CI, skips locally, when it is missing."""
    import shutil

    env = dict(os.environ)
    env.setdefault("TETHER_CI_CACHE", CI_CACHE)
    pinned = Path(env["TETHER_CI_CACHE"], "npm", "node_modules", ".bin", program)
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which(program, path=search_path(env))
    if found is None:
        why = f"{program} is not installed (.ci/setup installs {package})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


def cli_env(root: Path, program: str, **extra: str) -> dict[str, str]:
    """An environment with its own HOME and tether state under ``root``, the CLI on PATH."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEN_WIRE_", "TETHER_"))}
    env.update(
        HOME=str(home),
        TETHER_HOME=str(root / "tether-home"),
        XDG_RUNTIME_DIR=str(root / "xdg-run"),
        PATH=os.pathsep.join([str(Path(program).parent), search_path(os.environ)]),
        PYTHONUNBUFFERED="1",
        **{MARK: uuid.uuid4().hex},
    )
    env.update(extra)
    return env


def survivors(mark: str) -> list[str]:
    """``pid cmdline`` of every live process whose environment carries ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat.rpartition(b")")[2].split()[0] != b"Z":
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name} {command}")
    return found


def assert_no_survivors(mark: str) -> None:
    """Nothing started under ``mark`` is alive, once exits in progress are over (pidfds)."""
    wait_gone([int(line.split()[0]) for line in survivors(mark)], "the run's processes")
    left = survivors(mark)
    assert not left, f"processes outlived the run: {left}"


def kill_marked(mark: str) -> None:
    for line in survivors(mark):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def read_events(path: Path) -> list[Event]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_wire(events: list[Event], controls: list[Event]) -> None:
    """The invariants a parent relies on, checked on one run's events.jsonl.

    Every line is a valid v1 event; ``ready`` first, one ``exit`` last, seqs 1..n; each
    control acked exactly once, before anything it causes (an injection naming it, a turn
    it opens, the exit of a cancel or finalize); turns paired in order, each closed with
    a stop reason and usage; ``result`` exactly once, right before ``exit done`` (none
    otherwise) with the run's summed usage; a failed or timed-out exit says why.
    """
    from tether.wire.codec import Rejection, decode_event

    for event in events:
        decoded = decode_event(json.dumps(event))
        assert not isinstance(decoded, Rejection), (event, decoded)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ready", kinds[:3]
    assert kinds[-1] == "exit", kinds[-3:]
    assert kinds.count("exit") == 1
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    _check_acks(events, controls)
    _check_turns(events)
    exit_event = events[-1]
    if exit_event["status"] == "done":
        assert kinds.count("result") == 1
        assert kinds[-2] == "result"
    else:
        assert "result" not in kinds
        if exit_event["status"] != "cancelled":
            assert exit_event.get("error"), exit_event


def _check_acks(events: list[Event], controls: list[Event]) -> None:
    acks = Counter(e["ref"] for e in events if e["type"] == "control-ack" and "ref" in e)
    unread = _unread_close(events, controls, acks)
    for control in controls:
        if control is unread:
            continue
        assert acks[control["seq"]] == 1, f"control {control} acked {acks[control['seq']]} times"
    position = {e["seq"]: i for i, e in enumerate(events)}
    ack_at = {
        e["ref"]: position[e["seq"]] for e in events if e["type"] == "control-ack" and "ref" in e
    }
    for event in events:
        ref = event.get("ref")
        if event["type"] in ("steering-injected", "follow-up-injected") and ref in ack_at:
            assert ack_at[ref] < position[event["seq"]], event
    ends = {"cancel", "finalize", "close"}
    for control in controls:
        if control["type"] in ends and control["seq"] in ack_at:
            assert ack_at[control["seq"]] < len(events) - 1, control


def _check_turns(events: list[Event]) -> None:
    started = [e["turn"] for e in events if e["type"] == "turn-started"]
    completed = [e for e in events if e["type"] == "turn-complete"]
    assert [e["turn"] for e in completed] == started[: len(completed)]
    assert len(started) - len(completed) <= 1
    for turn in completed:
        assert turn["stop-reason"], turn
    result = next((e for e in events if e["type"] == "result"), None)
    if result is not None and "usage" in result:
        total: dict[str, int] = {}
        for turn in completed:
            add_usage(total, turn.get("usage", {}))
        assert {k: v for k, v in result["usage"].items() if v} == {
            k: v for k, v in total.items() if v
        }, (result["usage"], total)


@contextlib.contextmanager
def daemon_client(env: dict[str, str], timeout: float = 120) -> Iterator[Any]:
    """A ``tether daemon --foreground`` on a private short socket, and a client of it;
    the daemon is stopped (SIGTERM) and its socket directory removed afterwards."""
    import subprocess
    import sys

    from tests.support.daemon import wait_answering
    from tether.daemon.rpc.client import DaemonClient

    socket_dir = Path("/tmp") / f"td{os.getpid()}-{uuid.uuid4().hex[:6]}"
    socket_dir.mkdir(mode=0o700)
    path = socket_dir / "d.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "daemon", "--foreground"],
        env=dict(env, TETHER_SOCKET=str(path)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_answering(path, daemon)
        with DaemonClient.connect(path) as client:
            client.settimeout(timeout)
            yield client
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        for leftover in socket_dir.iterdir():
            leftover.unlink()
        socket_dir.rmdir()


def _unread_close(events: list[Event], controls: list[Event], acks: Counter[Any]) -> Event | None:
    """The parent's own ``close`` (close when idle) after a turn that ended in an error the
    child cannot survive (its CLI died): sent once the turn was over, it races the child's
    exit, and a line written after the child stopped reading is never answered."""
    if not controls or events[-1].get("status") == "done":
        return None
    last = controls[-1]
    if last["type"] != "close" or acks[last["seq"]]:
        return None
    stops = [e.get("stop-reason") for e in events if e["type"] == "turn-complete"]
    return last if stops and stops[-1] == "error" else None
