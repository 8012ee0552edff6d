"""Fuzz the daemon's sans-IO frame decoder and message decoders.

    python fuzz/fuzz_daemon_frames.py [atheris args]     # with atheris installed
    python fuzz/fuzz_daemon_frames.py --iterations N     # bounded random loop otherwise

Invariant: any bytes, cut into any chunks, yield frames, a ProtocolError, or NEED_DATA;
decoding any frame yields a Request, a Response or a ProtocolError. Nothing raises.
"""

from __future__ import annotations

import random
import struct
import sys

from tether.daemon.rpc.protocol import (
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    decode_message,
    decode_request,
    decode_response,
)
from tether.wire.needdata import NEED_DATA

MAX_FRAME = 4096


def test_one_input(data: bytes) -> None:
    if not data:
        return
    step = data[0] % 17 + 1
    decoder = FrameDecoder(max_frame_bytes=MAX_FRAME)
    for start in range(1, len(data), step):
        decoder.feed(data[start : start + step])
        while True:
            item = decoder.next_frame()
            if item is NEED_DATA or isinstance(item, ProtocolError):
                break
            assert isinstance(item, bytes)
            assert len(item) <= MAX_FRAME
            for decode in (decode_request, decode_response, decode_message):
                assert isinstance(decode(item), Request | Response | ProtocolError)
        if isinstance(item, ProtocolError):
            assert decoder.buffered == 0
            break
    end = decoder.eof()
    assert end is None or isinstance(end, ProtocolError)


SEEDS = [
    b'{"id":1,"method":"agent.list","params":null}',
    b'{"id":2,"result":null}',
    b'{"id":3,"error":{"code":"busy","message":"m"}}',
    b'{"id":4,"result":1,"error":{"code":"busy","message":"m"}}',
]


def random_input(rng: random.Random) -> bytes:
    """Mostly well-formed frames, mutated: prefixes, bodies and cuts all go wrong."""
    parts = [bytes([rng.randrange(256)])]
    for _ in range(rng.randrange(1, 5)):
        body = bytearray(rng.choice(SEEDS))
        for _ in range(rng.randrange(4)):
            if body:
                body[rng.randrange(len(body))] = rng.randrange(256)
        size = len(body) if rng.random() < 0.8 else rng.choice([0, 2**32 - 1, MAX_FRAME + 1])
        parts.append(struct.pack("<I", size) + bytes(body))
    if rng.random() < 0.3:
        parts.append(rng.randbytes(rng.randrange(16)))
    return b"".join(parts)


def run_random(iterations: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(iterations):
        test_one_input(random_input(rng))


def main(argv: list[str]) -> None:
    try:
        import atheris  # type: ignore[import-not-found]
    except ImportError:
        iterations = (
            int(argv[argv.index("--iterations") + 1]) if "--iterations" in argv else 100_000
        )
        run_random(iterations)
        print(f"ok: {iterations} random inputs (atheris not installed)")
        return
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
