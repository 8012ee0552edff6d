"""tether.fsafe: the one safe open, with real symlinks, hard links, FIFOs and another uid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether import fsafe

pytestmark = pytest.mark.timeout(30)  # an open that blocks on a FIFO would hang
REFUSED = r"symbolic links|not a regular file|No such device"  # ELOOP, fstat, ENXIO


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text("secret")
    return path


@pytest.fixture
def room(tmp_path: Path) -> Path:
    path = tmp_path / "room"
    path.mkdir(mode=0o700)
    return path


def _open(room: Path, name: str, flags: int = os.O_RDONLY, **kw: bool) -> int:
    with fsafe.opened_dir(room) as dir_fd:
        return fsafe.open_in(dir_fd, name, flags, **kw)


def test_a_regular_file_of_ours_opens(room: Path) -> None:
    (room / "f").write_text("ok")
    fd = _open(room, "f")
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)


def test_a_symlink_is_never_followed(room: Path, victim: Path) -> None:
    (room / "f").symlink_to(victim)
    with pytest.raises(OSError, match=REFUSED) as info:
        _open(room, "f", os.O_WRONLY | os.O_APPEND)
    assert fsafe.is_refusal(info.value)
    assert victim.read_text() == "secret"


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY | os.O_APPEND])
def test_a_fifo_never_blocks(room: Path, flags: int) -> None:
    os.mkfifo(room / "f")
    with pytest.raises(OSError, match=REFUSED) as info:
        _open(room, "f", flags)
    assert fsafe.is_refusal(info.value)


def test_a_hard_link_to_a_victim_is_refused(room: Path, victim: Path) -> None:
    os.link(victim, room / "f")
    with pytest.raises(fsafe.UnsafeFileError, match="2 links"):
        _open(room, "f")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown to another uid")
def test_a_file_of_another_uid_is_refused(room: Path) -> None:
    (room / "f").write_text("hers")
    os.chown(room / "f", 54321, 54321)
    with pytest.raises(fsafe.UnsafeFileError, match="owned by uid 54321"):
        _open(room, "f")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown to another uid")
def test_a_directory_of_another_uid_is_refused(room: Path) -> None:
    os.chown(room, 54321, 54321)
    with pytest.raises(fsafe.UnsafeFileError, match="directory owned by uid 54321"):
        fsafe.open_dir(room)


def test_a_symlinked_directory_is_refused(room: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(room)
    with pytest.raises(OSError, match=r"Not a directory|symbolic links"):
        fsafe.open_dir(tmp_path / "link")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../victim", "x\0y"])
def test_only_plain_names(room: Path, name: str) -> None:
    with pytest.raises(fsafe.UnsafeFileError):
        _open(room, name)


@pytest.mark.parametrize(
    "path", ["{room}/../victim", "{room}/sub/f", "/etc/passwd", "{room}/./../room/f"]
)
def test_name_inside_refuses_anything_not_directly_inside(room: Path, path: str) -> None:
    with pytest.raises(fsafe.UnsafeFileError):
        fsafe.name_inside(room, path.format(room=room))
    assert fsafe.name_inside(room, f"{room}/f") == "f"


def test_create_is_exclusive_and_private(room: Path, victim: Path) -> None:
    (room / "planted").symlink_to(victim)
    with pytest.raises(FileExistsError):
        _open(room, "planted", os.O_WRONLY, create=True)
    fd = _open(room, "new", os.O_WRONLY, create=True)
    os.close(fd)
    assert (room / "new").stat().st_mode & 0o777 == 0o600
    assert victim.read_text() == "secret"


def test_unlink_removes_only_the_checked_file(room: Path) -> None:
    (room / "f").write_text("mine")
    with fsafe.opened_dir(room) as dir_fd:
        fd = fsafe.open_in(dir_fd, "f", os.O_RDONLY)
        st = os.fstat(fd)
        os.close(fd)
        os.replace(room / "f", room / "moved")
        (room / "f").write_text("another file now")
        with pytest.raises(fsafe.UnsafeFileError, match="replaced"):
            fsafe.unlink_in(dir_fd, "f", st)
        assert (room / "f").exists()
        os.replace(room / "moved", room / "f")
        fsafe.unlink_in(dir_fd, "f", st)
    assert not (room / "f").exists()


def test_replace_file_ignores_planted_temp_files(room: Path, victim: Path) -> None:
    (room / "final.txt.tmp").symlink_to(victim)
    os.mkfifo(room / ".final.txt.tmp")
    fsafe.replace_file(room / "final.txt", b"the answer")
    assert (room / "final.txt").read_bytes() == b"the answer"
    assert (room / "final.txt").stat().st_mode & 0o777 == 0o600
    assert victim.read_text() == "secret"
    (room / "final.txt").unlink()
    (room / "final.txt").symlink_to(victim)  # the name itself: replaced, never written through
    fsafe.replace_file(room / "final.txt", b"again")
    assert not (room / "final.txt").is_symlink()
    assert victim.read_text() == "secret"


def test_append_file_keeps_writing_to_the_file_it_opened(room: Path, victim: Path) -> None:
    (room / "control").write_bytes(b"")
    out = fsafe.AppendFile(room / "control")
    try:
        os.replace(room / "control", room / "original")
        (room / "control").symlink_to(victim)
        out.append(b"line")
    finally:
        out.close()
    assert (room / "original").read_bytes() == b"line\n"
    assert victim.read_text() == "secret"
    with pytest.raises(OSError, match=REFUSED):
        fsafe.append_line(room / "control", b"through the link?")
    assert victim.read_text() == "secret"


def test_read_all_is_bounded(room: Path) -> None:
    (room / "big").write_bytes(b"x" * 1000)
    fd = _open(room, "big")
    try:
        with pytest.raises(fsafe.UnsafeFileError, match="larger than 999"):
            fsafe.read_all(fd, 999)
    finally:
        os.close(fd)
