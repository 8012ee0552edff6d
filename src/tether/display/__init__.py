"""The display: the only code in tether that writes to a terminal.

Wire events go in (:meth:`Display.event`); the boundary (:mod:`tether.display.boundary`)
turns them into display messages (the kinds of :mod:`tether.framing.messages`), and a
renderer draws those: ``human`` (:mod:`tether.display.human`), ``stream-json``
(:mod:`tether.display.stream_json`) or ``wire`` (:mod:`tether.display.wire_out`, the raw
lines). Messages read from RESP frames or stream-json go in through
:meth:`Display.message` and are drawn by the same renderers.

Where output goes:

- ``human``: the live view (events, notices, status, the usage footer) goes to ``live``,
  by default stdout when stdout is a terminal, else stderr, so ``tether run ... > out.txt``
  captures only the answer. :meth:`Display.final` always writes the final answer to stdout,
  newline-terminated (after the footer; on a terminal the answer follows the streamed
  text). Colour, the live status line and the streamed partial line need a terminal (and
  ``color`` not False); otherwise the view is plain lines, cut to ``width`` (default 80).
- ``stream-json``: one JSON object per line on stdout, the shapes of REFERENCE-FACTS §2
  (plus ``user_input{content}`` for injected input). Nested runs (depth >= 1) appear only
  as their ``sub_agent_result``. ``final`` writes nothing: the answer is already in the
  stream. Notices and clarification/approval inbox messages go to stderr as plain lines.
- ``wire``: each event's original line (``raw``, else its encoding) on stdout; the rest as
  for ``stream-json``.

Nothing here imports rich until a human display for a terminal is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TextIO

from tether.display.boundary import Boundary, Item, Notice, UserInput

if TYPE_CHECKING:
    from tether.wire import AnyEvent

__all__ = [
    "Display",
    "Item",
    "Notice",
    "Output",
    "Renderer",
    "UserInput",
    "ended_label",
    "open_display",
]


def ended_label(status: str, stop_reason: str | None) -> str:
    """How the footer names a run's end: a `done` run whose last turn failed says so."""
    if status == "done" and stop_reason == "error":
        return "done, last turn failed"
    return status


Output = Literal["human", "stream-json", "wire"]
DEFAULT_WIDTH = 80


class Renderer(Protocol):
    def item(self, item: Item, *, run: str, depth: int) -> None: ...
    def raw(self, event: AnyEvent, raw: bytes | None, *, run: str, depth: int) -> bool: ...
    def status(self, *, state: str, elapsed_s: float, note: str | None) -> None: ...
    def inbox(self, message: Mapping[str, Any], *, run: str, depth: int) -> None: ...
    def notice(self, text: str, *, level: str) -> None: ...
    def final(
        self,
        *,
        status: str,
        final_text: str,
        usage: Mapping[str, object] | None,
        truncated: bool,
        elapsed_s: float,
    ) -> None: ...
    def close(self) -> None: ...


class Display:
    """One display: feed it events or messages, then :meth:`final` and :meth:`close`."""

    def __init__(self, renderer: Renderer) -> None:
        self._renderer = renderer
        self._boundary = Boundary()
        self._closed = False

    def event(self, event: AnyEvent, *, run: str, depth: int = 0, raw: bytes | None = None) -> None:
        """One validated wire event of run ``run`` (nested runs have ``depth >= 1``)."""
        if self._renderer.raw(event, raw, run=run, depth=depth):
            return
        for item in self._boundary.convert(event, run=run, depth=depth):
            self._renderer.item(item, run=run, depth=depth)

    def message(self, item: Item, *, run: str = "", depth: int = 0) -> None:
        """One display message (or :class:`UserInput` / :class:`Notice`), e.g. from a frame."""
        self._renderer.item(item, run=run, depth=depth)

    def status(self, *, state: str, elapsed_s: float, note: str | None = None) -> None:
        """The run's state: a live status line on a terminal, else a line per state change."""
        self._renderer.status(state=state, elapsed_s=elapsed_s, note=note)

    def inbox(self, message: Mapping[str, Any], *, run: str, depth: int = 0) -> None:
        """An inbox message ``{type, ...}`` from run ``run``."""
        self._renderer.inbox(message, run=run, depth=depth)

    def notice(self, text: str, *, level: str = "info") -> None:
        """A line from tether itself: ``level`` is ``info``, ``warning`` or ``error``."""
        self._renderer.notice(text, level=level)

    def final(
        self,
        *,
        status: str,
        final_text: str,
        usage: Mapping[str, object] | None,
        truncated: bool,
        elapsed_s: float,
    ) -> None:
        """The run ended: the usage footer, and (human output) the answer on stdout."""
        self._renderer.final(
            status=status,
            final_text=final_text,
            usage=usage,
            truncated=truncated,
            elapsed_s=elapsed_s,
        )

    def close(self) -> None:
        """End the live region and flush. Idempotent."""
        if not self._closed:
            self._closed = True
            self._renderer.close()

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False


def open_display(
    output: str,
    *,
    stdout: TextIO,
    stderr: TextIO,
    width: int | None = None,
    color: bool | None = None,
    live: TextIO | None = None,
) -> Display:
    """A display for ``output`` (``human``, ``stream-json`` or ``wire``); close it when done.

    ``live`` overrides where the human live view goes (default: stdout if it is a terminal,
    else stderr). ``color=None`` means colour and a live region exactly when that stream is
    a terminal and ``NO_COLOR`` is not set; ``False`` forces plain lines.
    """
    if output == "human":
        return Display(_human(stdout, stderr, width, color, live))
    if output == "stream-json":
        from tether.display.stream_json import StreamJsonRenderer

        return Display(StreamJsonRenderer(stdout, stderr))
    if output == "wire":
        from tether.display.wire_out import WireRenderer

        return Display(WireRenderer(stdout, stderr))
    raise ValueError(f"unknown output {output!r}: expected human, stream-json or wire")


def _human(
    stdout: TextIO, stderr: TextIO, width: int | None, color: bool | None, live: TextIO | None
) -> Renderer:
    import os

    from tether.display.human import HumanRenderer
    from tether.display.sinks import PlainSink, RichSink, Sink

    view = live if live is not None else (stdout if _isatty(stdout) else stderr)
    tty = _isatty(view)
    if color is None:
        color = tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
    if width is None and tty:
        try:
            width = os.get_terminal_size(view.fileno()).columns or None  # 0: size unknown
        except (AttributeError, OSError, ValueError):
            width = None
    sink: Sink = RichSink(view, width=width, live=tty) if color else PlainSink(view)
    if width is None and isinstance(sink, RichSink):
        width = sink.width
    return HumanRenderer(
        sink,
        width=width or DEFAULT_WIDTH,
        answer=stdout,
        answer_is_tty=_isatty(stdout),
        live=bool(color and tty),
    )
