"""Token usage of a model call or a turn (:class:`Usage`), summed and put on the wire.

Its own module so that what only counts usage (the agent CLI adapters) does not import
the provider interface's dataclasses (:mod:`tether.agent.provider`, ~10-15 ms of an
exec'd adapter child's start-up, while its CLI boots); the provider interface re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    def to_wire(self) -> dict[str, int]:
        """The wire's usage object: ``{"input": N, "output": N}`` plus cache counts if any."""
        out = {"input": self.input, "output": self.output}
        if self.cache_read:
            out["cache-read"] = self.cache_read
        if self.cache_write:
            out["cache-write"] = self.cache_write
        return out
