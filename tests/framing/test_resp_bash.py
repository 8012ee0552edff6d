"""Real bash: the spec's own writer, tether.sh, single writes and concurrent writers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.shell_lib import library_path
from tether.framing.resp import FrameRejection, PureReader
from tether.framing.resp_hiredis import HiredisReader

# Quoted verbatim from spec/message-protocol-and-display.md.
SPEC_WRITER = r"""
util_write_msg() {
    local nfields=$# field byte_len _out="" _seg=""
    printf -v _out '*%s\r\n' "$nfields"
    for field in "$@"; do
        byte_len=$(LC_ALL=C printf '%s' "$field" | wc -c)
        byte_len=${byte_len//[[:space:]]/}
        printf -v _seg '$%s\r\n%s\r\n' "$byte_len" "$field"
        _out+="$_seg"
    done
    printf '%s' "$_out"
}
"""

LIB = str(library_path())

FIELD_SETS: list[list[bytes]] = [
    [b"TEXT", "héllo wörld ☃ 𝄞 日本語".encode()],
    [b"TOOL_RESULT", b"toolu_01", b"bash", b"line 1\r\nline 2\nline 3\r\n\r\n"],
    [b"USAGE", b"", b"", b"0", b""],
    [b"RETRY"],
    [b"TEXT", b"\n\n  leading and trailing whitespace \t\n"],
    [b"TEXT", b"*1\r\n$1\r\na\r\n"],
    [b"TOOL_RESULT", b"id", b"big", ("é" * 50_000).encode()],  # 100 KB, multi-byte
    [b"BYTES", bytes(range(1, 256))],
]


def bash(script: str, *args: bytes, env: dict[str, str] | None = None) -> bytes:
    proc = subprocess.run(
        ["bash", "-c", script, "bash", *args],
        capture_output=True,
        check=True,
        timeout=60,
        env=env,
    )
    return proc.stdout


def parse_all(cls: type[PureReader], data: bytes) -> list[object]:
    reader = cls()
    reader.feed(data)
    out: list[object] = list(reader)
    assert reader.eof() is None
    return out


@pytest.mark.parametrize("fields", FIELD_SETS, ids=range(len(FIELD_SETS)))
@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_spec_writer_frames_parse_to_the_same_fields(fields: list[bytes], locale: str) -> None:
    env = dict(os.environ, LC_ALL=locale, LANG=locale)
    out = bash(SPEC_WRITER + 'util_write_msg "$@"', *fields, env=env)
    for cls in (PureReader, HiredisReader):
        assert parse_all(cls, out) == [tuple(fields)]
        bytewise = cls()
        got: list[object] = []
        for i in range(len(out)):
            bytewise.feed(out[i : i + 1])
            got += list(bytewise)
        assert got == [tuple(fields)]


@pytest.mark.parametrize("fields", FIELD_SETS, ids=range(len(FIELD_SETS)))
def test_tether_write_msg_matches_the_spec_writer(fields: list[bytes]) -> None:
    env = dict(os.environ, LC_ALL="C.UTF-8")
    ours = bash(f'source "{LIB}"; tether_write_msg "$@"', *fields, env=env)
    spec = bash(SPEC_WRITER + 'util_write_msg "$@"', *fields, env=env)
    assert ours == spec
    for cls in (PureReader, HiredisReader):
        assert parse_all(cls, ours) == [tuple(fields)]


def test_a_stream_of_spec_frames_in_one_shell() -> None:
    script = SPEC_WRITER + (
        "util_write_msg TEXT 'first'\n"
        "util_write_msg THINKING $'multi\\nline\\r\\n'\n"
        'util_write_msg TOOL_CALL bash toolu_1 \'{"command":"ls"}\' command ls\n'
        "util_write_msg STOP end_turn\n"
        "util_write_msg RETRY\n"
    )
    out = bash(script)
    expected = [
        (b"TEXT", b"first"),
        (b"THINKING", b"multi\nline\r\n"),
        (b"TOOL_CALL", b"bash", b"toolu_1", b'{"command":"ls"}', b"command", b"ls"),
        (b"STOP", b"end_turn"),
        (b"RETRY",),
    ]
    for cls in (PureReader, HiredisReader):
        assert parse_all(cls, out) == expected


def test_shell_lib_command_prints_the_library_path(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "shell-lib"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    path = Path(proc.stdout.strip())
    assert path.is_absolute()
    assert path.resolve() == library_path().resolve()
    out = bash(f'source "$({sys.executable} -m tether shell-lib)"; tether_write_msg STOP end_turn')
    assert out == b"*2\r\n$4\r\nSTOP\r\n$8\r\nend_turn\r\n"


def test_tether_write_msg_needs_a_type() -> None:
    proc = subprocess.run(
        ["bash", "-c", f'source "{LIB}"; tether_write_msg'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "usage" in proc.stderr


@pytest.mark.parametrize("size", [10, 5000, 100_000])
def test_tether_write_msg_is_one_write(size: int) -> None:
    """A SEQPACKET socket as stdout keeps write boundaries: one frame is one packet."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    with parent, child:
        proc = subprocess.Popen(
            [
                "bash",
                "-c",
                f'source "{LIB}"; tether_write_msg TEXT "$1" "a\r\nb"',
                "bash",
                "x" * size,
            ],
            stdout=child.fileno(),
        )
        child.close()
        packets = []
        while packet := parent.recv(1 << 20):
            packets.append(packet)
        assert proc.wait(timeout=60) == 0
    assert len(packets) == 1
    assert parse_all(PureReader, packets[0]) == [(b"TEXT", b"x" * size, b"a\r\nb")]


def test_the_spec_writer_is_not_one_write() -> None:
    """Why tether.sh uses dd: bash's printf writes line by line."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent, child:
        proc = subprocess.Popen(
            ["bash", "-c", SPEC_WRITER + "util_write_msg TEXT hello"], stdout=child.fileno()
        )
        child.close()
        packets = []
        while packet := parent.recv(1 << 16):
            packets.append(packet)
        assert proc.wait(timeout=60) == 0
    assert len(packets) > 1
    assert b"".join(packets) == b"*2\r\n$4\r\nTEXT\r\n$5\r\nhello\r\n"


CONCURRENT = """
source "$1"
i=0
while ((i < $3)); do
    tether_write_msg TEXT "writer $2 frame $i" "$4" "end $2"
    i=$((i + 1))
done
"""


def run_writers(target: str, body: str, writers: int = 50, frames: int = 4) -> None:
    procs = [
        subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec >>"$5"\n{CONCURRENT}',
                "bash",
                LIB,
                str(w),
                str(frames),
                body,
                target,
            ]
        )
        for w in range(writers)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0


def check_frames(data: bytes, body: str, writers: int = 50, frames: int = 4) -> None:
    for cls in (PureReader, HiredisReader):
        results = parse_all(cls, data)
        assert not [r for r in results if isinstance(r, FrameRejection)]
        expected = {
            (b"TEXT", b"writer %d frame %d" % (w, i), body.encode(), b"end %d" % w)
            for w in range(writers)
            for i in range(frames)
        }
        assert len(results) == len(expected)
        assert set(results) == expected  # type: ignore[arg-type]


def test_fifty_concurrent_writers_to_one_file_never_interleave(tmp_path: Path) -> None:
    target = tmp_path / "frames.bin"
    body = "line\r\n" * 3000  # 18 KB frames: several pages each
    run_writers(str(target), body)
    check_frames(target.read_bytes(), body)


def test_fifty_concurrent_writers_to_one_pipe_never_interleave(tmp_path: Path) -> None:
    body = "ab\r\n" * 900  # 3.6 KB frames: within PIPE_BUF, so each write is atomic
    read_fd, write_fd = os.pipe()
    chunks: list[bytes] = []
    with os.fdopen(read_fd, "rb", buffering=0) as reader:
        procs = [
            subprocess.Popen(
                ["bash", "-c", CONCURRENT, "bash", LIB, str(w), "4", body],
                stdout=write_fd,
            )
            for w in range(50)
        ]
        os.close(write_fd)
        while chunk := reader.read(1 << 16):
            chunks.append(chunk)
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    check_frames(b"".join(chunks), body)


def test_tether_inbox_appends_one_line(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    env = dict(os.environ, TETHER_INBOX_PATH=str(inbox))
    env.pop("RUNEX_INBOX_PATH", None)
    script = (
        f'source "{LIB}"\n'
        'tether_inbox progress \'{"text":"step 3"}\'\n'
        "tether_inbox done\n"
        'tether_inbox $\'odd "type"\\t\' $\'  {\\n  "q": "which model?",\\r\\n  "n": [1, 2]\\n}\'\n'
        "tether_inbox empty '{ }'\n"
        'tether_inbox utf8 \'{"text":"héllo ☃"}\'\n'
    )
    bash(script, env=env)
    lines = inbox.read_bytes().split(b"\n")
    assert lines[-1] == b""
    objects = [json.loads(line) for line in lines[:-1]]
    assert objects == [
        {"type": "progress", "text": "step 3"},
        {"type": "done"},
        {"type": 'odd "type"\t', "q": "which model?", "n": [1, 2]},
        {"type": "empty"},
        {"type": "utf8", "text": "héllo ☃"},
    ]
    assert inbox.stat().st_mode & 0o777 == 0o600


def test_tether_inbox_falls_back_to_runex_path(tmp_path: Path) -> None:
    inbox = tmp_path / "runex.jsonl"
    env = dict(os.environ, RUNEX_INBOX_PATH=str(inbox))
    env.pop("TETHER_INBOX_PATH", None)
    bash(f'source "{LIB}"; tether_inbox progress \'{{"text":"x"}}\'', env=env)
    assert json.loads(inbox.read_text()) == {"type": "progress", "text": "x"}


def test_tether_inbox_prefers_tether_path(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "tether.jsonl", tmp_path / "runex.jsonl"
    env = dict(os.environ, TETHER_INBOX_PATH=str(ours), RUNEX_INBOX_PATH=str(theirs))
    bash(f'source "{LIB}"; tether_inbox done', env=env)
    assert json.loads(ours.read_text()) == {"type": "done"}
    assert not theirs.exists()


@pytest.mark.parametrize(
    ("args", "env_path", "code", "message"),
    [
        (["progress"], False, 1, "neither TETHER_INBOX_PATH nor RUNEX_INBOX_PATH"),
        (["progress", "[1, 2]"], True, 2, "must be an object"),
        ([], True, 2, "usage"),
    ],
)
def test_tether_inbox_errors(
    tmp_path: Path, args: list[str], env_path: bool, code: int, message: str
) -> None:
    env = dict(os.environ)
    env.pop("TETHER_INBOX_PATH", None)
    env.pop("RUNEX_INBOX_PATH", None)
    if env_path:
        env["TETHER_INBOX_PATH"] = str(tmp_path / "inbox.jsonl")
    proc = subprocess.run(
        ["bash", "-c", f'source "{LIB}"; tether_inbox "$@"', "bash", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == code
    assert message in proc.stderr
    assert not (tmp_path / "inbox.jsonl").exists()


def test_concurrent_inbox_lines_stay_whole(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    env = dict(os.environ, TETHER_INBOX_PATH=str(inbox))
    text = "x" * 9000
    line = f'\'{{"w":\'$1\',"text":"{text}"}}\''
    script = f'source "{LIB}"; for i in 1 2 3; do tether_inbox progress {line}; done'
    procs = [subprocess.Popen(["bash", "-c", script, "bash", str(w)], env=env) for w in range(30)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    objects = [json.loads(line) for line in inbox.read_text().splitlines()]
    assert len(objects) == 90
    assert sorted(o["w"] for o in objects) == sorted(list(range(30)) * 3)
