"""Fuzz the RESP frame readers and the message decoders: nothing may escape.

Each input is fed to the pure and the hiredis-backed reader, whole and in chunks whose
sizes come from the input itself, under default and tight limits. Every result must be a
frame or a FrameRejection, both readers must give identical results, and every frame must
decode to a message or a FrameRejection (and a message must round-trip through its frame).

Run under atheris when it is installed (``python fuzz/fuzz_resp.py -atheris_runs=100000``),
else a bounded random loop: ``python fuzz/fuzz_resp.py [iterations]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from tether.framing import messages, stream_json
from tether.framing.resp import FrameRejection, PureReader, encode_frame
from tether.framing.resp_hiredis import HiredisReader

SEEDS = [
    encode_frame([b"TEXT", "héllo\r\nwörld".encode()]),
    encode_frame([b"TOOL_CALL", b"bash", b"t1", b'{"command":"ls"}', b"command", b"ls"]),
    encode_frame([b"USAGE", b"10", b"20", b"", b"0"]) + encode_frame([b"STOP", b"end_turn"]),
    encode_frame([b"SUB_AGENT_RESULT", b"s", b"ok", b"1", b"2", b"", b"text"]),
    encode_frame([b"RETRY"]) + b"garbage\n" + encode_frame([b"ERROR", b""]),
    b"*2\r\n*1\r\n$1\r\na\r\n+OK\r\n:5\r\n*-1\r\n$-1\r\n",
    b"*3\r\n$4\r\nTEXT\r\n$99999999999\r\n",
    b"%1\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n~1\r\n*0\r\n|1\r\n*0\r\n*0\r\n:1\r\n",
]
TOKENS = [b"*", b"$", b"\r\n", b"\r", b"\n", b"0", b"1", b"-1", b"99999", b"\xff", b"+", b":"]
TOKENS += [b"%", b"~", b">", b"|", b"=", b"(", b",", b"#", b"_", b"!", b"*1\r\n", b"$0\r\n\r\n"]
TIGHT = {"max_fields": 3, "max_field_bytes": 8, "max_frame_bytes": 40}


def read(cls: type[PureReader], chunks: list[bytes], limits: dict[str, int]) -> list[object]:
    reader = cls(**limits)
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        for result in reader:
            assert isinstance(result, tuple | FrameRejection), result
            out.append(result)
    out.append(reader.eof())
    return out


def one_input(data: bytes) -> None:
    step = (data[0] % 7 + 1) if data else 1
    chunked = [data[i : i + step] for i in range(0, len(data), step)]
    for limits in ({}, TIGHT):
        whole = read(PureReader, [data], limits)
        assert read(PureReader, chunked, limits) == whole
        assert read(HiredisReader, [data], limits) == whole
        assert read(HiredisReader, chunked, limits) == whole
    for result in whole:
        if isinstance(result, tuple):
            message = messages.from_fields(result)
            if not isinstance(message, FrameRejection):
                assert messages.from_fields(messages.to_fields(message)) == message
                stream_json.to_stream_json(message)
                messages.to_wire_events(message)


def random_loop(iterations: int, seed: int = 0) -> int:
    return harness.random_loop(one_input, SEEDS, TOKENS, iterations, seed)


if __name__ == "__main__":
    harness.main(one_input, SEEDS, TOKENS, 100_000)
