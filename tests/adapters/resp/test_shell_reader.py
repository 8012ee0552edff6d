"""``tether_read_msg`` (tether.sh's frame reader) in real bash, against the Python writer."""

from __future__ import annotations

import random
import subprocess

import pytest

from tether.framing.resp import encode_frame
from tether.framing.resp_hiredis import open_reader

from .helpers import LIB

# Echo every frame read back as one frame (the read status first), then the final status.
ECHO = f"""
source "{LIB}"
while true; do
    tether_read_msg
    rc=$?
    ((rc == 0)) || {{ tether_write_msg END "$rc"; exit 0; }}
    tether_write_msg "${{TETHER_MSG[@]}}"
done
"""

EDGES = [
    "",
    "plain",
    "a\r\nb",
    "\r\n",
    "\n",
    "\r",
    "*3\r\n$1\r\nx\r\n",
    "$5\r\n",
    "héllo ✓ 日本 🙂",
    " spaces around ",
    "back\\slash\\",
    "tab\there",
    "x" * 70000,
    "-" * 4097,
]


def _echo(data: bytes) -> list[tuple[bytes, ...]]:
    done = subprocess.run(
        ["bash", "-c", ECHO], input=data, capture_output=True, timeout=30, check=True
    )
    reader = open_reader()
    reader.feed(done.stdout)
    frames = list(reader)
    assert reader.eof() is None
    assert all(isinstance(f, tuple) for f in frames), frames
    return [f for f in frames if isinstance(f, tuple)]


def test_edge_texts_round_trip_byte_for_byte() -> None:
    frames = [[b"USER_INPUT", b"0", text.encode()] for text in EDGES]
    frames += [[b"A"], [b"B", b"", b""], [b"TOOL_CALL", b"n", b"i", b"{}", b"k", b"v"]]
    got = _echo(b"".join(encode_frame(f) for f in frames))
    assert got[-1] == (b"END", b"1")  # a clean end of input
    assert [list(f) for f in got[:-1]] == frames


def test_random_texts_round_trip() -> None:
    rng = random.Random(20261130)
    alphabet = "ab \r\n*$:+-\\\"'é✓🙂\t\x01\x7f"
    frames = []
    for _ in range(60):
        count = rng.randint(1, 5)
        fields = ["".join(rng.choices(alphabet, k=rng.randint(0, 40))) for _ in range(count)]
        frames.append([f.encode() for f in fields])
    frames = [f for f in frames if f[0]]  # tether_write_msg needs a non-empty type field
    got = _echo(b"".join(encode_frame(f) for f in frames))
    assert [list(f) for f in got[:-1]] == frames


@pytest.mark.parametrize(
    "data",
    [
        b"+OK\r\n",
        b"*x\r\n",
        b"*-1\r\n",
        b"*01\r\n$1\r\na\r\n",
        b"*1\r\n:5\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\r\n$3\r\nabcd\r\n",
        b"*1\r\n$3\r\nab",  # cut short
        b"*2\r\n$1\r\na\r\n",  # a field missing
        b"*1\r\n$3\r\na\x00b\r\n",  # NUL: bash cannot hold it
    ],
)
def test_bad_input_is_status_2(data: bytes) -> None:
    got = _echo(data)
    assert got[-1] == (b"END", b"2")


def test_frames_before_a_bad_one_are_read() -> None:
    good = encode_frame([b"USER_INPUT", b"0", b"fine"])
    got = _echo(good + b"*1\r\n$9\r\nshort\r\n")
    assert got == [(b"USER_INPUT", b"0", b"fine"), (b"END", b"2")]
