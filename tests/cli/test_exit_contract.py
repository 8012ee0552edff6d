"""Every ``tether`` command exits only with 0, 2, 3, 4 or 5, and never with a traceback.

Real processes: each subcommand's failure paths (bad flags, bad input, missing runs and
agents, no daemon, unsafe directories, a broken index), then signals: SIGTERM and SIGHUP
to commands blocked reading, and a SIGTERM after ``tether run`` has ended (its answer is
still being written) must not kill it with the default action (-15, a shell's 143).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waits import pid_alive, spin_until, wait_gone, wait_until
from tether.cli import COMMANDS

CONTRACT = {0, 2, 3, 4, 5}
TIMEOUT = 60


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(tmp_path),
        TETHER_HOME=str(tmp_path / "home"),
        XDG_RUNTIME_DIR=str(runtime),
        TETHER_SOCKET=str(runtime / "d.sock"),
        NO_COLOR="1",
    )
    yield env
    # a failing command never starts a daemon on the way (one would be left running)
    assert not (runtime / "d.sock").exists(), "a daemon was started"


def tether(
    env: dict[str, str], *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd or env["HOME"],
        timeout=TIMEOUT,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
    )


def assert_contract(done: subprocess.CompletedProcess[str], code: int | None = None) -> None:
    assert done.returncode in CONTRACT, done
    assert "Traceback" not in done.stderr, done.stderr
    if code is not None:
        assert done.returncode == code, done


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_unknown_flag_is_a_usage_error(env: dict[str, str], name: str) -> None:
    assert_contract(tether(env, name, "--no-such-flag"), 2)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_is_plain_text(env: dict[str, str], name: str) -> None:
    """``--help`` shows no reST markup (the module docstrings' ``double backticks``)."""
    done = tether(env, name, "--help")
    assert_contract(done, 0)
    for markup in ("``", ":func:", ":class:", ":mod:", ":data:", ":meth:"):
        assert markup not in done.stdout, done.stdout


def test_the_top_level(env: dict[str, str]) -> None:
    assert_contract(tether(env), 2)
    assert_contract(tether(env, "no-such-command"), 2)
    assert_contract(tether(env, "--help"), 0)
    assert_contract(tether(env, "--version"), 0)


FAILURES: list[tuple[list[str], int]] = [
    (["run"], 2),
    (["run", "--deadline", "-1", "task"], 2),
    (["run", "--agent", "resp", "task"], 2),
    (["run", "--no-stdin", "--provider", "no-such-provider", "task"], 2),
    (["child"], 2),  # no FEN_WIRE_* environment
    (["runs", "--limit", "x"], 2),
    (["show", "no-such-run"], 2),
    (["replay", "no-such-run"], 2),
    (["display", "/no/such/file"], 2),
    (["display", "--width", "3", "-"], 2),
    (["inbox", "no-such-run"], 2),
    (["inbox", "drain", "/no/such/inbox.jsonl"], 2),
    (["daemon"], 2),
    (["daemon", "status"], 3),
    (["daemon", "stop"], 0),  # nothing to stop
    (["daemon", "--foreground", "start"], 2),
    (["agent", "status", "nobody"], 3),  # no daemon runs
    (["agent", "list"], 3),
    (["agent", "--host", "b", "list"], 3),  # no cluster
    (["agent", "spawn", "a", "--pty"], 2),
    (["agent", "spawn", "a", "--env", "NOEQUALS"], 2),
    (["agent", "answer", "a"], 2),
    (["channel", "push", "c1", "--content", "x"], 3),
    (["dashboard"], 3),
    (["wire", "validate", "/no/such/file"], 2),
    (["model-server", "--script", "/no/such/script.json"], 2),
]


@pytest.mark.parametrize(("argv", "code"), FAILURES, ids=[" ".join(a) for a, _ in FAILURES])
def test_failure_paths(env: dict[str, str], argv: list[str], code: int) -> None:
    assert_contract(tether(env, *argv), code)


NONSENSE = {"nan", "1e308", "inf", "0", "-1", "1e400", "99999", "-inf", "1e3"}
BAD_NUMBERS: list[list[str]] = [
    ["run", "--deadline", "nan", "task"],
    ["run", "--deadline", "1e308", "task"],
    ["run", "--deadline", "inf", "task"],
    ["run", "--deadline", "0", "task"],
    ["run", "--finalize-before", "-1", "task"],
    ["agent", "spawn", "a", "--deadline", "nan"],
    ["agent", "spawn", "a", "--timeout", "1e400"],
    ["agent", "spawn", "a", "--pty", "--cols", "99999", "--", "sh"],
    ["agent", "ask", "a", "hi", "--timeout", "nan"],
    ["agent", "stop", "a", "--timeout", "-inf"],
    ["agent", "events", "a", "--after-seq", "-1"],
    ["agent", "events", "a", "--limit", "1e3"],
    ["model-server", "--script", "/no/such/script.json", "--port", "99999"],
    ["dashboard", "--port", "-1"],
    ["daemon", "--frame-timeout", "nan", "status"],
    ["daemon", "--max-connections", "0", "status"],
    ["daemon", "stop", "--timeout", "1e308"],
    ["runs", "--limit", "0"],
    ["child", "--max-tokens", "nan"],
]


@pytest.mark.parametrize("argv", BAD_NUMBERS, ids=[" ".join(a) for a in BAD_NUMBERS])
def test_a_bad_number_is_a_usage_error_in_one_line(env: dict[str, str], argv: list[str]) -> None:
    """NaN, infinities, 1e308, a port over 65535, a negative count: exit 2 with one line
    naming the option (argparse's usage before it), and nothing started or recorded."""
    done = tether(env, *argv)
    assert_contract(done, 2)
    option = next(a for a, value in itertools.pairwise(argv) if value in NONSENSE)
    (error,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert f"argument {option}: " in error, done.stderr
    assert "internal error" not in done.stderr
    assert not (Path(env["TETHER_HOME"]) / "runs").exists()


@pytest.mark.parametrize("value", ["abc", "9", "nan"])
def test_a_bad_number_in_the_environment_is_a_usage_error(env: dict[str, str], value: str) -> None:
    done = tether(
        {**env, "TETHER_NATS_REPLICAS": value}, "daemon", "--nats", "nats://x:1", "init-cluster"
    )
    assert_contract(done, 2)
    assert f"$TETHER_NATS_REPLICAS: {value!r} is not" in done.stderr


def test_rejected_input_lines_are_bad_input(env: dict[str, str]) -> None:
    assert_contract(tether(env, "wire", "validate", "-", stdin=b"not json\n"), 2)
    assert_contract(tether(env, "display", "--from", "wire", "-", stdin=b"[]\n"), 2)


def test_the_daemon_cannot_start_in_a_shared_directory(env: dict[str, str], tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    unsafe = {**env, "TETHER_SOCKET": str(shared / "d.sock")}
    done = tether(unsafe, "daemon", "--foreground")
    assert_contract(done, 2)
    assert "0755" in done.stderr
    assert_contract(tether(unsafe, "daemon", "start", "--timeout", "5"), 2)
    assert_contract(tether(unsafe, "agent", "spawn", "a", "--task", "x"), 2)
    assert_contract(tether(unsafe, "agent", "status", "a"), 3)  # nothing answers there


def test_no_daemon_in_json_is_an_error_document(env: dict[str, str]) -> None:
    done = tether(env, "agent", "status", "nobody", "--json")
    assert_contract(done, 3)
    assert json.loads(done.stdout)["error"]["code"] == "unavailable"


def test_an_unreadable_run_index(env: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "tether.db").write_bytes(b"this is not a database" * 100)
    (home / "tether.db").chmod(0o600)
    for argv in (["runs"], ["show", "latest"], ["replay", "latest"], ["inbox", "r1"]):
        done = tether(env, *argv)
        assert_contract(done, 2)
        assert done.stderr.count("\n") <= 2, done.stderr  # one line, not a traceback


def test_a_home_that_is_a_file(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "home").write_text("not a directory")
    for argv in (["runs"], ["show", "latest"], ["run", "--no-stdin", "task"]):
        assert_contract(tether(env, *argv), 2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize(
    "argv", [["wire", "validate", "-"], ["display", "--from", "wire", "-"]], ids=["wire", "display"]
)
def test_a_signal_stops_a_blocked_command_with_3(
    env: dict[str, str], argv: list[str], sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", *argv],
        stdin=subprocess.PIPE,  # nobody writes: the command blocks reading it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=env["HOME"],
    )
    assert proc.stdin is not None
    assert proc.stderr is not None
    try:
        _wait_reading_stdin(proc)
        proc.send_signal(sig)
        assert proc.wait(TIMEOUT) == 3
        assert b"Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stderr.close()


def _wait_reading_stdin(proc: subprocess.Popen[bytes]) -> None:
    """Until the main thread sits in read(0, ...) (``/proc/PID/syscall``: nr 0, fd 0x0)."""
    syscall = Path(f"/proc/{proc.pid}/syscall")
    wait_until(lambda: syscall.read_text().startswith("0 0x0 "), "a read of stdin", proc=proc)


def test_sigterm_after_the_run_ended_does_not_kill_it(env: dict[str, str], tmp_path: Path) -> None:
    """The answer goes to stdout only once the run is over; a pipe nobody reads holds the
    rest of a 1 MB answer back, so a SIGTERM lands after the run, while it is written."""
    answer = "x" * 1_000_000
    proc = _start_run(env, tmp_path, {"text": answer}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.read(1)  # the run is over: its answer is being written
    assert first == b"x"
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    proc.stdout.close()
    assert proc.wait(TIMEOUT) == 0
    assert (first + rest).decode().strip() == answer


def test_the_exit_code_is_kept_while_the_interpreter_shuts_down(env: dict[str, str]) -> None:
    """Shutting down restores the default action (death, -15) of every signal with a Python
    handler but leaves an ignored one ignored, so once the code is decided the three
    stopping signals must be ignored: an atexit hook sees what shutting down will see."""
    probe = (
        "import atexit, signal, sys\n"
        "def seen():\n"
        "    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)\n"
        "    names = [signal.getsignal(s) for s in sigs]\n"
        "    print('ignored' if all(h == signal.SIG_IGN for h in names) else names)\n"
        "atexit.register(seen)\n"
        "sys.argv = ['tether', *sys.argv[1:]]\n"
        "from tether.cli import entrypoint\n"
        "entrypoint()\n"
    )
    for argv in (["runs"], ["show", "no-such-run"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=env["HOME"],
            timeout=TIMEOUT,
            check=False,
        )
        assert done.returncode in CONTRACT, done
        assert done.stdout.strip().splitlines()[-1] == "ignored", done


def test_a_sigterm_as_the_child_starts_cancels_the_run(env: dict[str, str], tmp_path: Path) -> None:
    """A SIGTERM that lands while ``tether run`` is still starting its child (before its
    own handling is in place) is acted on once it is: the child is cancelled and the run
    recorded ``cancelled``, exit 3, nothing left running. Raising where the signal landed
    left the run's row ``starting`` and, inside msgspec building a decoder, crashed."""
    proc = _start_run(env, tmp_path, {"text": "slow", "delay_ms": 60_000}, stderr=subprocess.PIPE)
    try:
        _wait_for_child(env, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 3
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        proc.stderr.close()
    assert b"Traceback" not in stderr, stderr
    assert _left_running(env) == []
    runs = [json.loads(line) for line in tether(env, "runs", "--json").stdout.splitlines()]
    assert [run["status"] for run in runs] == ["cancelled"], runs


def _start_run(
    env: dict[str, str],
    tmp_path: Path,
    reply: dict[str, object],
    *,
    stdout: int = subprocess.DEVNULL,
    stderr: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """``tether run`` on one scripted reply, its stdin closed."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([reply]))
    argv = ["run", "--no-stdin", "--provider", "scripted", "--script", str(script), "task"]
    return subprocess.Popen(
        [sys.executable, "-m", "tether", *argv],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=tmp_path,
    )


def _tether_processes(env: dict[str, str]) -> list[tuple[int, str]]:
    """Processes started with this test's TETHER_HOME: (pid, command line)."""
    marker = f"TETHER_HOME={env['TETHER_HOME']}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found.append((int(entry.name), cmdline))
    return found


def _wait_for_child(env: dict[str, str], proc: subprocess.Popen[bytes]) -> None:
    """Until a ``tether child`` of this test exists (the parent is then mid-start)."""
    spin_until(lambda: any(pid != proc.pid for pid, _ in _tether_processes(env)), "the child")


def _left_running(env: dict[str, str]) -> list[tuple[int, str]]:
    """This test's processes still alive (not zombies), once those that end have ended."""
    wait_gone([pid for pid, _ in _tether_processes(env)], "this test's processes")
    return [(pid, cmdline) for pid, cmdline in _tether_processes(env) if pid_alive(pid)]
