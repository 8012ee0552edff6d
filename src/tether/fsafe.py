"""Safe access to files a child (or any process of this user) may have replaced.

Theory of operation. A child runs as the same user and can touch every file of its run
directory: it may swap one for a symlink to a victim file, a hard link to it, or a FIFO
that blocks whoever opens it. Every open of such a file goes through :func:`open_in`:

1. the directory is opened first (``O_DIRECTORY | O_NOFOLLOW``) and the file is opened
   *relative to that descriptor*, by a single plain name (no ``/``, no ``..``), so the
   file is inside the expected directory whatever the paths around it do later;
2. the file is opened with ``O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC``: a symlink fails with
   ``ELOOP``, a FIFO never blocks (and then fails the checks);
3. ``fstat`` of the open descriptor checks what was really opened: a regular file, owned
   by the expected uid, exactly one link (a hard link to a victim has two).

Creation is ``O_CREAT | O_EXCL`` with mode 0600: an existing name (a planted symlink
included) is never truncated or written through. :func:`unlink_in` removes only the very
file that was checked (same ``st_dev``/``st_ino``, looked up again relative to the
directory descriptor). Everything a check refuses raises :class:`UnsafeFileError`, an
``OSError``, so callers keep one ``except OSError`` for "could not use the file".

This module imports nothing from tether: every layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from tether.errors import TetherError

FILE_MODE: Final = 0o600
_SAFE: Final = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_SLICE: Final = 1 << 20


class UnsafeFileError(TetherError, OSError):
    """A file (or a name for one) that tether refuses to use; ``strerror`` says why."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EPERM, why, os.fspath(path))


def is_refusal(exc: OSError) -> bool:
    """True for the errors a safe open gives on a planted file (symlink, FIFO, device...)."""
    return isinstance(exc, UnsafeFileError) or exc.errno in (errno.ELOOP, errno.ENXIO)


def plain_name(name: str) -> str:
    """``name`` itself when it is one plain directory entry, else :class:`UnsafeFileError`."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeFileError(name, "not a plain file name")
    return name


def name_inside(directory: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """The entry name of ``path`` when it is *directly* inside ``directory`` (lexically).

    No symlink is resolved and no ``..`` is allowed: the name is then opened relative to
    a descriptor of ``directory`` (see :func:`open_in`).
    """
    where = os.path.normpath(os.path.abspath(os.fspath(directory)))
    text = os.fspath(path)
    if ".." in text.split("/"):
        raise UnsafeFileError(text, "climbs out with ..")
    full = os.path.abspath(text)
    if os.path.dirname(full) != where:
        raise UnsafeFileError(text, f"not directly inside {where}")
    return plain_name(os.path.basename(full))


def open_dir(path: str | os.PathLike[str], *, uid: int | None = None) -> int:
    """A descriptor of directory ``path`` (not a symlink), owned by ``uid`` (default: us)."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        st = os.fstat(fd)
        want = os.getuid() if uid is None else uid
        if st.st_uid != want:
            raise UnsafeFileError(path, f"directory owned by uid {st.st_uid}, not {want}")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def opened_dir(path: str | os.PathLike[str], *, uid: int | None = None) -> Iterator[int]:
    """:func:`open_dir` as a context manager."""
    fd = open_dir(path, uid=uid)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def opened_subdir(dir_fd: int, name: str, *, uid: int | None = None) -> Iterator[int]:
    """A descriptor of directory ``name`` inside ``dir_fd``, opened relative to it by one
    plain name (not a symlink, owned by ``uid``), as a context manager."""
    fd = os.open(plain_name(name), _DIR_FLAGS, dir_fd=dir_fd)
    try:
        _owned(fd, name, stat.S_ISDIR, "a directory", uid)
        yield fd
    finally:
        os.close(fd)


def check_regular(
    fd: int, name: str | os.PathLike[str], *, uid: int | None = None
) -> os.stat_result:
    """``fstat(fd)`` when it is a regular file with one link owned by ``uid``, else raise."""
    st = _owned(fd, name, stat.S_ISREG, "a regular file", uid)
    if st.st_nlink != 1:
        raise UnsafeFileError(name, f"has {st.st_nlink} links, not 1")
    return st


def _owned(
    fd: int,
    name: str | os.PathLike[str],
    is_kind: Callable[[int], bool],
    kind: str,
    uid: int | None,
) -> os.stat_result:
    """``fstat(fd)`` when it is ``kind`` (``is_kind`` of its mode) owned by ``uid``."""
    st = os.fstat(fd)
    want = os.getuid() if uid is None else uid
    if not is_kind(st.st_mode):
        raise UnsafeFileError(name, f"not {kind}")
    if st.st_uid != want:
        raise UnsafeFileError(name, f"owned by uid {st.st_uid}, not {want}")
    return st


def open_in(
    dir_fd: int, name: str, flags: int, *, create: bool = False, uid: int | None = None
) -> int:
    """Open entry ``name`` of the directory ``dir_fd`` safely (see the module docstring).

    ``flags`` are the access flags (``os.O_RDONLY``, ``os.O_WRONLY | os.O_APPEND``...);
    with ``create`` the file must not exist yet and is made 0600.
    """
    flags |= _SAFE
    if create:
        flags |= os.O_CREAT | os.O_EXCL
    fd = os.open(plain_name(name), flags, FILE_MODE, dir_fd=dir_fd)
    try:
        check_regular(fd, name, uid=uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_path(
    path: str | os.PathLike[str], flags: int, *, create: bool = False, uid: int | None = None
) -> int:
    """:func:`open_in` for ``path``'s entry in its own directory (opened without following)."""
    where, name = os.path.split(os.path.abspath(os.fspath(path)))
    with opened_dir(where) as dir_fd:
        return open_in(dir_fd, name, flags, create=create, uid=uid)


def open_fifo(path: str | os.PathLike[str], flags: int, *, uid: int | None = None) -> int:
    """Open the FIFO at ``path`` like :func:`open_path` opens a file: by one plain name in
    its directory, never following a link, never blocking (``O_NONBLOCK``: writing with no
    reader fails ``ENXIO``), and refused unless it is a FIFO owned by ``uid``."""
    where, name = os.path.split(os.path.abspath(os.fspath(path)))
    with opened_dir(where) as dir_fd:
        fd = os.open(plain_name(name), flags | _SAFE, dir_fd=dir_fd)
    try:
        _owned(fd, path, stat.S_ISFIFO, "a FIFO", uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_all(fd: int, limit: int) -> bytes:
    """Everything readable from ``fd`` (at most ``limit`` bytes, else :class:`UnsafeFileError`)."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(READ_SLICE, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise UnsafeFileError(f"fd {fd}", f"larger than {limit} bytes")
    return b"".join(chunks)


def read_given(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of a file the user named (a script, a config: links are followed, any
    owner), read without ever blocking: a FIFO or a device is refused (``O_NONBLOCK``,
    then ``fstat`` must show a regular file), and a file over ``limit`` bytes is refused
    before it is read (both :class:`UnsafeFileError`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(path, "not a regular file")
        if st.st_size > limit:
            raise UnsafeFileError(path, f"{st.st_size} bytes, over the limit of {limit}")
        return read_all(fd, limit)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a short write, e.g. on a nearly full disk, is continued)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def unlink_in(dir_fd: int, name: str, st: os.stat_result) -> None:
    """Remove ``name`` from ``dir_fd`` only if it is still the file ``st`` describes."""
    now = os.stat(plain_name(name), dir_fd=dir_fd, follow_symlinks=False)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise UnsafeFileError(name, "replaced since it was checked")
    os.unlink(name, dir_fd=dir_fd)


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to ``fd`` (``O_APPEND``) whole or not at all.

    A write that fails part-way (a full disk: ``ENOSPC``, ``EFBIG``) cuts the file back to
    where ``data`` began before raising, so no torn line is left for a reader (the caller
    must be the file's only writer, as the parent is of its control file).
    """
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError:
        if written:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, os.fstat(fd).st_size - written)
        raise


def append_line(path: str | os.PathLike[str], line: bytes) -> None:
    """Append one line (a newline is added) with ``O_APPEND`` to an existing safe file."""
    fd = open_path(path, os.O_WRONLY | os.O_APPEND)
    try:
        append_whole(fd, line + b"\n")
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` (0600) atomically: a new temp file, then rename over.

    The temp file has a fresh random name and is created exclusively, so nothing planted
    beside ``path`` (a ``.tmp`` symlink or FIFO) is ever opened; the rename replaces a
    planted ``path`` itself, never its target.
    """
    where, name = os.path.split(os.path.abspath(os.fspath(path)))
    with opened_dir(where) as dir_fd:
        replace_in(dir_fd, name, data)


def replace_in(dir_fd: int, name: str, data: bytes) -> None:
    """:func:`replace_file` for entry ``name`` of the directory ``dir_fd``."""
    plain_name(name)
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    fd = open_in(dir_fd, tmp, os.O_WRONLY, create=True)
    try:
        write_all(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


@contextmanager
def made_subdir(dir_fd: int, name: str) -> Iterator[int]:
    """:func:`opened_subdir` of ``name`` in ``dir_fd``, made first (0700) when missing and
    made private: a symlink, another uid's directory or a file there is refused."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(plain_name(name), 0o700, dir_fd=dir_fd)
    with opened_subdir(dir_fd, name) as fd:
        os.fchmod(fd, 0o700)
        yield fd


def read_tail(path: str | os.PathLike[str], limit: int) -> bytes:
    """The last ``limit`` bytes of a safe file at ``path`` (raises ``OSError``)."""
    fd = open_path(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit))
    finally:
        os.close(fd)


class AppendFile:
    """One safe file kept open for appending lines: a path swapped later changes nothing.

    The parent opens its run's control file once, right after creating it, and appends
    every control through this descriptor; a child that replaces the name with a symlink or
    a FIFO only cuts itself off from its own controls.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = open_path(path, os.O_WRONLY | os.O_APPEND)

    def append(self, line: bytes) -> None:
        """Append ``line`` and a newline (``OSError`` once closed or on a write error)."""
        if self._fd is None:
            raise UnsafeFileError(self.path, "closed")
        append_whole(self._fd, line + b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
