"""An exec'd adapter child gets its CLI started before its own interpreter.

The parent computes the CLI's launch and execs the pre-exec stage
(``runtime/child/adapters/prestart_stage.py``), which starts the reaper and the CLI and then
execs ``tether child`` in the same process; the child adopts both. The CLI is the silent
TEST DOUBLE (tests/doubles/silent_cli.py, SIGTERM ignored), run as an ACP agent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import tether
from tests.doubles import silent_cli
from tests.support.waits import wait_gone, wait_pid_file, wait_until, wait_until_async
from tether.runtime.child.adapters import prestart, prestart_stage
from tether.runtime.child.adapters.early import ADOPT_ENV
from tether.runtime.parent import forkserver

from .cli_helpers import MARK, survivors

pytestmark = pytest.mark.timeout(60)
COLD = {forkserver.ENV: "0"}  # exec'd, as a process's first run


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")[:-1]


def _signals_and_umask(pid: int) -> list[str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return [line for line in lines if line.startswith(("SigBlk", "SigIgn", "Umask"))]


def _fds(pid: int) -> dict[str, str]:
    """The process's descriptors and what they are (those closed meanwhile left out)."""
    found = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[name] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
    return found


async def _spawn(tmp: Path, argv: list[str], env: dict[str, str]) -> tether.LocalRunHandle:
    return await tether.spawn(
        "hello",
        agent="acp",
        argv=argv,
        cwd=tmp,
        runs_root=tmp / "runs",
        db=tmp / "runs.db",
        env=env,
    )


def test_the_cli_is_the_childs_own_in_its_own_group_with_only_its_pipes(tmp_path: Path) -> None:
    pid_file = tmp_path / "cli.pid"

    async def go() -> None:
        handle = await _spawn(tmp_path, silent_cli(pid_file=pid_file), COLD)
        try:
            cli = await asyncio.to_thread(wait_pid_file, pid_file)
            # started by the stage, which then execs the child naming it in its environment
            named = f"{ADOPT_ENV}=".encode()
            wait_until(lambda: any(e.startswith(named) for e in _environ(handle.pid)), "the exec")
            ppid, pgid, sid = _stat(cli)[1:4]
            assert int(ppid) == handle.pid  # waitpid and a pidfd work for the child
            assert int(pgid) == int(sid) == cli  # its own session and group
            fds = _fds(cli)
            assert sorted(fds) == ["0", "1", "2"], fds
            assert all(target.startswith("pipe:") for target in fds.values()), fds
            names = {e.partition(b"=")[0] for e in _environ(cli)}
            assert b"TETHER_REAP_TOKEN" in names
            for name in (ADOPT_ENV, *prestart.CHILD_ONLY_ENV):
                assert name.encode() not in names
            # the child holds this side's end of each of the CLI's pipes, and no spec
            theirs = list(_fds(handle.pid).values())
            assert not any("memfd:" in target for target in theirs), theirs
            assert sum(target in fds.values() for target in theirs) == 3, theirs
        finally:
            await handle.cancel()
            result = await handle.wait()
        assert result.status == "cancelled"

    asyncio.run(go())


def test_the_cli_sees_the_same_environment_as_when_the_child_starts_it(tmp_path: Path) -> None:
    def names(env: dict[str, str], where: Path) -> list[bytes]:
        where.mkdir()
        pid_file = where / "cli.pid"

        async def go() -> list[bytes]:
            handle = await _spawn(where, silent_cli(pid_file=pid_file), {**COLD, **env})
            try:
                cli = await asyncio.to_thread(wait_pid_file, pid_file)
                return [e.partition(b"=")[0] for e in _environ(cli)]
            finally:
                await handle.cancel()
                await handle.wait()

        return asyncio.run(go())

    staged = names({}, tmp_path / "staged")
    by_child = names({prestart.ENV: "0"}, tmp_path / "child")
    # the same variables in the same order (the values name each run's own files),
    # the switch itself aside
    assert [n for n in staged if n != prestart.ENV.encode()] == [
        n for n in by_child if n != prestart.ENV.encode()
    ]


@pytest.mark.parametrize("when", ["at-once", "cli-running"])
def test_sigkill_of_the_child_leaves_nothing_behind(when: str, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    pid_file = tmp_path / "cli.pid"

    async def go() -> tether.Result:
        handle = await _spawn(tmp_path, silent_cli(pid_file=pid_file), {**COLD, MARK: mark})
        if when == "cli-running":
            await asyncio.to_thread(wait_pid_file, pid_file)
        os.kill(handle.pid, signal.SIGKILL)  # the stage, or the child it became
        return await handle.wait()

    result = asyncio.run(go())
    assert result.status == "failed"
    # the reaper ends the CLI (it ignores SIGTERM: SIGKILL after the grace) and leaves
    _wait_none_left(mark)


def test_a_cli_that_cannot_be_exec_d_fails_the_run_honestly(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cli"

    async def go() -> tether.Result:
        handle = await _spawn(tmp_path, [str(missing)], COLD)
        return await handle.wait()

    result = asyncio.run(go())
    assert result.status == "failed"
    assert result.error is not None
    assert f"cannot start {missing}" in result.error


def test_the_stage_exits_4_when_it_cannot_exec_the_child(tmp_path: Path) -> None:
    fd = os.memfd_create("spec")
    os.write(fd, b"not a spec")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", prestart_stage.__file__, str(fd), str(tmp_path / "x")],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        os.close(fd)
    assert done.returncode == 4
    assert "the CLI is started late" in done.stderr
    assert "cannot exec" in done.stderr


def test_no_stage_for_another_source_tree_or_when_switched_off(tmp_path: Path) -> None:
    request = prestart.CliRequest("acp", silent_cli(pid_file=tmp_path / "p"), [], None)
    command = [sys.executable, "-m", "tether", "child", "--agent", "acp"]
    env = dict(os.environ)
    staged = prestart.plan(request, command, str(tmp_path), env)
    assert staged is not None
    os.close(staged.spec_fd)
    assert staged.argv[-len(command) :] == command
    assert prestart.plan(request, command, str(tmp_path), {**env, prestart.ENV: "0"}) is None
    other = {**env, "PYTHONPATH": str(tmp_path)}
    assert prestart.plan(request, command, str(tmp_path), other) is None
    builtin = prestart.CliRequest("resp", ["x"], [], None)  # not in LAUNCHES
    assert prestart.plan(builtin, command, str(tmp_path), env) is None


def test_killed_after_the_cli_started_and_before_tether_child_runs_nothing_survives(
    tmp_path: Path,
) -> None:
    # the stage execs a stand-in for `tether child` that never adopts anything (sleep):
    # SIGKILLed there, between the CLI's start and any Python, the reaper ends the CLI
    mark = uuid.uuid4().hex
    pid_file = tmp_path / "cli.pid"
    request = prestart.CliRequest("acp", silent_cli(pid_file=pid_file), [], None)
    env = {**os.environ, MARK: mark}
    staged = prestart.plan(request, ["/bin/sleep", "60"], str(tmp_path), env)
    assert staged is not None
    try:
        stage = subprocess.Popen(
            staged.argv, env=env, cwd=tmp_path, pass_fds=(staged.spec_fd,), start_new_session=True
        )
    finally:
        os.close(staged.spec_fd)
    try:
        cli = wait_pid_file(pid_file)
        assert int(_stat(cli)[1]) == stage.pid  # the CLI is the stand-in's child
        cmdline = Path(f"/proc/{stage.pid}/cmdline")
        wait_until(lambda: cmdline.read_bytes().startswith(b"/bin/sleep"), "the stand-in's exec")
        assert any(e.startswith(f"{ADOPT_ENV}=".encode()) for e in _environ(stage.pid))
        os.kill(stage.pid, signal.SIGKILL)
    finally:
        stage.kill()
        stage.wait()
    _wait_none_left(mark)


def test_the_cli_gets_the_same_signals_and_umask_either_way(tmp_path: Path) -> None:
    # a shell that execs cat as the CLI: neither changes a disposition of its own (a
    # Python CLI would); read once it is cat (dash blocks signals while it waits)
    def status(env: dict[str, str], where: Path) -> list[str]:
        where.mkdir()
        pid_file = where / "cli.pid"
        script = f"echo $$ > {pid_file}; exec cat"

        async def go() -> list[str]:
            handle = await _spawn(where, ["/bin/sh", "-c", script], {**COLD, **env})
            try:
                cli = await asyncio.to_thread(wait_pid_file, pid_file)
                cmdline = Path(f"/proc/{cli}/cmdline")
                await wait_until_async(lambda: cmdline.read_bytes().startswith(b"cat"), "cat")
                return _signals_and_umask(cli)
            finally:
                await handle.cancel()
                await handle.wait()

        return asyncio.run(go())

    staged = status({}, tmp_path / "staged")
    by_child = status({prestart.ENV: "0"}, tmp_path / "child")
    assert len(staged) == 3
    assert staged == by_child


def _wait_none_left(mark: str) -> None:
    """Until no process of this test's mark is alive (their exits: pidfds)."""
    wait_gone([int(line.split()[0]) for line in survivors(mark)], "the run's processes")
    assert survivors(mark) == []
