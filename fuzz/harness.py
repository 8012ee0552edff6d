"""What every fuzz harness here shares: a byte mutator and the atheris-or-random-loop main.

A harness module defines ``one_input(data: bytes)`` (raising only on a real bug), seed
inputs and splice tokens, and calls :func:`main`. Under atheris (when installed) the
inputs come from coverage-guided fuzzing; otherwise from a bounded, seeded random loop
of mutated seeds, which pytest smoke tests also run.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence


def mutate(rng: random.Random, data: bytes, tokens: Sequence[bytes]) -> bytes:
    """``data`` with 1-8 random edits: delete, insert, splice a token, overwrite a byte."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(4)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            del buf[min(pos, len(buf) - 1)]
        elif op == 1:
            buf.insert(pos, rng.randrange(256))
        elif op == 2:
            buf[pos:pos] = rng.choice(tokens)
        elif buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
    return bytes(buf)


def random_loop(
    one_input: Callable[[bytes], None],
    seeds: Sequence[bytes],
    tokens: Sequence[bytes],
    iterations: int,
    seed: int = 0,
) -> int:
    """Feed ``iterations`` mutated seeds to ``one_input``; returns the count."""
    rng = random.Random(seed)
    for _ in range(iterations):
        one_input(mutate(rng, rng.choice(seeds), tokens))
    return iterations


def main(
    one_input: Callable[[bytes], None],
    seeds: Sequence[bytes],
    tokens: Sequence[bytes],
    default_count: int,
) -> None:
    """Fuzz with atheris when installed, else a random loop of ``argv[1]`` inputs."""
    try:
        import atheris  # type: ignore[import-not-found]
    except ImportError:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else default_count
        done = random_loop(one_input, seeds, tokens, count)
        print(f"atheris not installed; random loop over {done} inputs: ok")
        return
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
