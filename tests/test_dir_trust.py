"""Another local user cannot get in through a directory tether did not make (items 12-13).

The second-uid tests run when the suite runs as root: "she" is uid 54321 (no passwd entry
needed), her files are chowned to her, and her fake daemon is a forked child that drops to
her uid with ``os.setuid`` before it binds its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.daemon.pty.drive_client import open_drive_async
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonClient, UntrustedDaemon
from tether.paths import UnsafeDirectory, ensure_private_dir

HER = 54321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root")
pytestmark = pytest.mark.timeout(60)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=40,
        stdin=subprocess.DEVNULL,
    )


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        out[str(path)] = (st.st_mode, st.st_uid, st.st_size, data)
    out[str(root)] = (root.lstat().st_mode, root.lstat().st_uid, 0, b"")
    return out


# -- the rules, as this user -----------------------------------------------------------


def test_a_new_directory_is_made_0700_at_every_missing_level(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        made = ensure_private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for part in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert part.stat().st_mode & 0o777 == 0o700


def test_a_world_writable_directory_of_ours_is_refused_not_chmodded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="writable by other users"):
        ensure_private_dir(home)
    assert home.stat().st_mode & 0o777 == 0o777


def test_a_readable_directory_of_ours_is_tightened(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    ensure_private_dir(home)
    assert home.stat().st_mode & 0o777 == 0o700


def test_an_ancestor_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match=f"refusing to use {shared}"):
        ensure_private_dir(shared / "mine")
    assert not (shared / "mine").exists()
    shared.chmod(0o1777)  # like /tmp: others cannot rename what is ours
    assert ensure_private_dir(shared / "mine") == shared / "mine"


def test_a_symlinked_home_of_ours_is_resolved_and_checked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    assert ensure_private_dir(tmp_path / "link") == real


def test_a_symlink_to_an_unsafe_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "open"
    real.mkdir()
    real.chmod(0o777)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeDirectory):
        ensure_private_dir(tmp_path / "link")


# -- her directories ------------------------------------------------------------------


@pytest.fixture
def hers(tmp_path: Path) -> Path:
    """Her TETHER_HOME: 0777, with her own tether.db 0666."""
    home = tmp_path / "her-home"
    home.mkdir()
    (home / "tether.db").write_bytes(b"her database")
    (home / "tether.db").chmod(0o666)
    os.chown(home / "tether.db", HER, HER)
    os.chown(home, HER, HER)
    home.chmod(0o777)
    return home


@as_root
@pytest.mark.parametrize("via_symlink", [False, True])
def test_tether_run_refuses_her_home_and_leaks_nothing(
    hers: Path, tmp_path: Path, tether_env: dict[str, str], via_symlink: bool
) -> None:
    home = hers
    if via_symlink:
        home = tmp_path / "my-home-link"
        home.symlink_to(hers)
    before = _snapshot(hers)
    env = {**tether_env, "TETHER_HOME": str(home)}
    done = _cli(env, "run", "--provider", "scripted", "a secret task text")
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "refusing to use" in done.stderr
    assert _snapshot(hers) == before  # not chmodded, nothing written, her db untouched


@as_root
def test_the_daemon_refuses_her_runtime_dir(tmp_path: Path, tether_env: dict[str, str]) -> None:
    runtime = tmp_path / "her-runtime"
    runtime.mkdir()
    os.chown(runtime, HER, HER)
    runtime.chmod(0o700)
    env = {**tether_env, "XDG_RUNTIME_DIR": str(runtime)}
    done = _cli(env, "daemon", "--foreground")
    assert done.returncode == 2, done  # "cannot start": a set-up that cannot work
    assert "Traceback" not in done.stderr
    assert f"refusing to use {runtime}" in done.stderr
    assert not (runtime / "tether").exists()


# -- her fake daemon ------------------------------------------------------------------


@contextlib.contextmanager
def _her_daemon(directory: Path) -> Iterator[tuple[Path, int]]:
    """A server on ``directory/daemon.sock`` run as her; yields it and a pipe of what it got."""
    directory.mkdir()
    os.chown(directory, HER, HER)
    path = directory / "daemon.sock"
    got_r, got_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # her process: no exceptions may escape into pytest
        try:
            os.close(got_r)
            os.close(ready_r)
            os.setgid(HER)
            os.setuid(HER)
            os.umask(0)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(4)
            os.write(ready_w, b"x")
            while True:
                conn, _ = server.accept()
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    data = conn.recv(65536)
                    os.write(got_w, b"%d\n" % len(data))
                conn.close()
        finally:
            os._exit(0)
    os.close(got_w)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"x"
        yield path, got_r
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(got_r)
        os.close(ready_r)


def _received(got_r: int) -> list[int]:
    sizes = []
    while select.select([got_r], [], [], 3)[0]:
        chunk = os.read(got_r, 100)
        if not chunk:
            break
        sizes += [int(n) for n in chunk.split()]
        if len(sizes) >= 4:
            break
    return sizes


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory under /tmp that she can traverse (tmp_path's parents are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="td-her-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@as_root
def test_clients_send_nothing_to_a_daemon_of_another_uid(
    reachable: Path, tether_env: dict[str, str]
) -> None:
    with _her_daemon(reachable / "her-run") as (path, got_r):
        with pytest.raises(UntrustedDaemon, match=f"runs as uid {HER}"):
            DaemonClient.connect(path)

        async def aclient() -> None:
            await AsyncDaemonClient.open(path)

        async def drive() -> None:
            await open_drive_async(path, "x")

        for attempt in (aclient, drive):
            with pytest.raises(UntrustedDaemon, match=f"runs as uid {HER}"):
                asyncio.run(attempt())
        env = {**tether_env, "TETHER_SOCKET": str(path), "SECRET_TOKEN": "s3cret"}
        spawn = ["agent", "spawn", "x", "--env", "SECRET_TOKEN=s3cret", "--", "true"]
        done = _cli(env, *spawn)
        assert done.returncode == 2, done
        assert "Traceback" not in done.stderr
        assert f"runs as uid {HER}" in done.stderr
        assert _received(got_r) == [0, 0, 0, 0]  # four connections, not one byte sent
