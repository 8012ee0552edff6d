"""What bench/check_approvals.py and bench/check_worktrees.py play issues 26 and 27 with,
from outside, as a user would: the ``tether`` CLI in subprocesses (``tether daemon start``,
``tether agent ...``, ``tether run``), ``tether model-server`` with a script of our own
and its request log, and ``/proc`` to find and end what a world started. No tether
internals: only what is on PATH after ``pip install`` and ``. .ci/setup``.

A :class:`World` is one private tether (``TETHER_HOME``, ``XDG_RUNTIME_DIR``,
``TETHER_SOCKET`` under a fresh directory); every check raises :class:`Failed` with what
was seen; :func:`play` runs scenarios N times each and prints PASS/FAIL per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's tests/
from tests.support.agentd import alive, home_processes

ROOT = Path(__file__).resolve().parent.parent
NPM_BIN = Path(os.environ.get("TETHER_CI_CACHE", "/var/cache/tether-ci")) / "npm/node_modules/.bin"
TIMEOUT_S = 120.0  # a step that has not happened by then failed (loaded 2-core machine)


class Failed(Exception):
    """A check failed: what was seen."""


def check(ok: object, what: str) -> None:
    if not ok:
        raise Failed(what)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def tether_bin() -> str:
    found = shutil.which("tether")
    check(found, "tether is not on PATH (pip install -e .)")
    return str(found)


@dataclass
class Done:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class ModelServer:
    """``tether model-server --script FILE --log FILE``, its URL from its first line."""

    def __init__(self, world: World, name: str, replies: list[dict[str, Any]]) -> None:
        self.script = world.root / f"{name}.script.json"
        self.script.write_text(json.dumps(replies))
        self.log = world.root / f"{name}.requests.jsonl"
        argv = [tether_bin(), "model-server", "--script", str(self.script), "--log", str(self.log)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=world.env
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        check(first.startswith("listening on "), f"model-server said {first!r}")
        self.url = first.removeprefix("listening on ").strip()
        world.closers.append(self.close)
        world.keep.add(self.proc.pid)

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def model_requests(self) -> list[dict[str, Any]]:
        """The requests that took a reply (model calls, not probes)."""
        return [r for r in self.requests() if r.get("reply") is not None]

    def text(self) -> str:
        """Every request body as one JSON text (to look for a string the model was sent)."""
        return json.dumps([r.get("body") for r in self.requests()])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class World:
    """One private tether under ``root``."""

    root: Path
    env: dict[str, str] = field(init=False)
    closers: list[Callable[[], None]] = field(default_factory=list)
    keep: set[int] = field(default_factory=set)  # pids kill_all spares (model servers)

    def __post_init__(self) -> None:
        env = dict(os.environ)
        env["PATH"] = f"{NPM_BIN}:{env.get('PATH', '')}"
        env.pop("XDG_STATE_HOME", None)
        (self.root / "rt").mkdir(mode=0o700)
        env.update(
            TETHER_HOME=str(self.root / "home"),
            XDG_RUNTIME_DIR=str(self.root / "rt"),
            TETHER_SOCKET=str(self.root / "rt" / "d.sock"),
        )
        self.env = env

    # -- the CLI ------------------------------------------------------------------------------

    def tether(
        self, *args: str, codes: tuple[int, ...] = (0,), timeout: float = TIMEOUT_S, **kw: Any
    ) -> Done:
        argv = [tether_bin(), *args]
        try:
            got = subprocess.run(
                argv,
                check=False,
                capture_output=True,
                text=True,
                env=kw.pop("env", self.env),
                timeout=timeout,
                stdin=kw.pop("stdin", subprocess.DEVNULL),
                **kw,
            )
        except subprocess.TimeoutExpired as exc:
            raise Failed(f"`tether {' '.join(args)}` hung for {timeout} s") from exc
        done = Done(got.returncode, got.stdout, got.stderr)
        check(
            got.returncode in codes,
            f"`tether {' '.join(args)}` exited {got.returncode} (wanted {codes}):\n"
            f"{got.stdout[-1500:]}{got.stderr[-1500:]}",
        )
        return done

    def status(self, name: str) -> dict[str, Any]:
        return self.tether("agent", "status", name, "--json").json()  # type: ignore[no-any-return]

    def list_rows(self) -> dict[str, dict[str, Any]]:
        rows = self.tether("agent", "list", "--json").json()["agents"]
        return {row["name"]: row for row in rows}

    def approvals(self) -> list[dict[str, Any]]:
        return self.tether("agent", "approvals", "--json").json()["approvals"]  # type: ignore[no-any-return]

    def events(self, name: str) -> list[dict[str, Any]]:
        out = self.tether("agent", "events", name, "--json").out
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def wait_for(
        self, what: str, probe: Callable[[], Any], timeout: float = TIMEOUT_S, every: float = 0.2
    ) -> Any:
        """``probe()``'s first truthy value, polled (a user's script polls too)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(every)
        raise Failed(f"{what}: not within {timeout} s (last: {str(last)[:800]})")

    def wait_state(self, name: str, *states: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        seen: list[str] = []

        def probe() -> dict[str, Any] | None:
            row = self.status(name)
            seen[:] = [row["state"]]
            return row if row["state"] in states else None

        try:
            return self.wait_for(f"{name} in {states}", probe, timeout)  # type: ignore[no-any-return]
        except Failed:
            raise Failed(
                f"{name} never reached {states} (last {seen}); {self.tail(name)}"
            ) from None

    def turns_done(self, name: str) -> int:
        return sum(1 for e in self.events(name) if e["type"] == "turn-complete")

    def wait_turns(self, name: str, n: int, timeout: float = TIMEOUT_S) -> None:
        try:
            self.wait_for(f"{name}'s turn {n}", lambda: self.turns_done(name) >= n, timeout)
        except Failed:
            raise Failed(f"{name}: turn {n} never completed; {self.tail(name)}") from None

    def tail(self, name: str) -> str:
        with contextlib.suppress(Exception):
            got = self.tether("agent", "events", name, codes=(0, 2, 3, 4, 5)).out
            return "events:\n" + "\n".join(got.splitlines()[-15:])
        return ""

    def final_text(self, name: str) -> str:
        texts = [e["text"] for e in self.events(name) if e["type"] == "assistant-text"]
        return texts[-1] if texts else ""

    # -- the daemon -----------------------------------------------------------------------------

    def start_daemon(self, *flags: str) -> None:
        self.tether("daemon", *flags, "start")

    def daemon_pid(self) -> int:
        out = self.tether("daemon", "status").out
        check("(pid " in out, f"daemon status: {out}")
        return int(out.split("(pid ", 1)[1].split(")", 1)[0])

    def kill_daemon(self) -> None:
        pid = self.daemon_pid()
        os.kill(pid, signal.SIGKILL)
        self.wait_for("the daemon's death", lambda: not alive(pid), 10)

    # -- processes ----------------------------------------------------------------------------

    def pids(self, *, agents_only: bool = False) -> list[int]:
        """Processes whose environment carries this world's TETHER_HOME (the daemon, the
        agents and their CLIs and tools)."""
        found = home_processes(Path(self.env["TETHER_HOME"]))
        return [pid for pid, agent in found.items() if agent or not agents_only]

    def kill_all(self) -> None:
        """SIGKILL every process of this world but its model servers (a reboot, the model
        being elsewhere)."""
        for pid in self.pids():
            if pid in self.keep:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        left = lambda: [p for p in self.pids() if alive(p) and p not in self.keep]  # noqa: E731
        self.wait_for("every process gone", lambda: not left(), 20)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.tether("daemon", "stop", codes=(0, 2, 3, 4, 5), timeout=20)
        for closer in reversed(self.closers):
            with contextlib.suppress(Exception):
                closer()
        self.keep.clear()
        self.kill_all()


@contextlib.contextmanager
def world(keep: bool) -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="tp-", dir="/tmp"))  # short: a socket path < 108 bytes
    w = World(root)
    try:
        yield w
    finally:
        w.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


# -- playing ---------------------------------------------------------------------------------


Scenario = Callable[[World], str | None]


def play(scenarios: dict[str, Scenario], argv: list[str] | None = None, *, doc: str = "") -> int:
    """Run the chosen scenarios ``--runs`` times each; one line per run; exit 1 on a failure."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--scenario", "-s", action="append", help="substring of a name")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep each world's directory")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    chosen = {
        name: run
        for name, run in scenarios.items()
        if not args.scenario or any(s in name for s in args.scenario)
    }
    if args.list:
        print("\n".join(chosen))
        return 0
    failures: dict[str, int] = {}
    print(f"# tether {tether_bin()}; load {load()}", flush=True)
    for name, run in chosen.items():
        for n in range(1, args.runs + 1):
            start = time.monotonic()
            with world(args.keep) as w:
                try:
                    note = run(w)
                    verdict = "PASS"
                except Failed as exc:
                    note, verdict = str(exc), "FAIL"
                except Exception:
                    note, verdict = traceback.format_exc(limit=6), "FAIL"
                if verdict == "FAIL":
                    failures[name] = failures.get(name, 0) + 1
                    if args.keep:
                        note = f"{note}\n  (kept {w.root})"
            took = time.monotonic() - start
            print(f"{verdict} {name} run {n}: {took:.1f} s, load {load()}", flush=True)
            if note:
                print("    " + str(note).replace("\n", "\n    "), flush=True)
    print(
        f"# {len(chosen) * args.runs - sum(failures.values())} passed, "
        f"{sum(failures.values())} failed {failures or ''}"
    )
    return 1 if failures else 0


def main_of(scenarios: dict[str, Scenario], doc: str) -> None:
    sys.exit(play(scenarios, doc=doc))
