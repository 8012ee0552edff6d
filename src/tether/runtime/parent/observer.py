"""What a composition adds to a run without a second driver: :class:`Observer`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.runtime.parent.outcome import RunResult
    from tether.wire import AnyEvent

__all__ = ["Observer"]


class Observer:
    """Told by the run driver what happens (every method optional).

    Called on the driver's loop, in order: :meth:`on_event` for each validated event
    (after the watch mirrored it), :meth:`on_inbox` for each drained slice of inbox
    messages, :meth:`on_note` for each problem kept on the handle (``RunHandle.notes``),
    :meth:`on_end` once with the result, before :meth:`RunHandle.wait` returns; what it
    returns is kept as a note on the handle. An observer must not raise.
    """

    def on_event(self, event: AnyEvent, raw: bytes) -> None:
        """One validated event and its line."""

    def on_inbox(self, messages: list[dict[str, Any]]) -> None:
        """Messages the run's inbox received (already stored in SQLite)."""

    def on_note(self, text: str) -> None:
        """A problem noticed on the way, kept on the handle."""

    async def on_end(self, result: RunResult) -> str | None:
        """The run has ended with ``result``; a problem to note, or None."""
        return None
