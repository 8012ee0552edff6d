"""Where human output lands: plain lines, or rich with colour and a live region.

Theory of operation: the human renderer produces styled text (``write(text, style)``,
where ``text`` may hold several lines or end mid-line) and a status line. A sink decides
how that reaches the terminal:

- :class:`PlainSink`: the text as is, no colour, no cursor movement. Used when the stream
  is not a terminal or colour is off; this is what tests compare.
- :class:`RichSink`: rich styles. On a terminal (``live=True``) it keeps a live region at
  the bottom: the line being streamed and the status line. Finished lines are printed above
  it, so streamed text, tool output and the status never overwrite each other. Without a
  terminal (colour forced), text is printed as it comes and there is no live region.

rich is imported only when a :class:`RichSink` is built.
"""

from __future__ import annotations

import contextlib
from typing import IO, TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


Parts = list[tuple[str, str | None]]


class Sink(Protocol):
    def write(self, parts: Parts) -> None: ...
    def set_status(self, text: str | None, style: str | None = None) -> None: ...
    def stop_live(self) -> None: ...
    def close(self) -> None: ...


def safe_write(stream: TextIO, text: str) -> None:
    """Write ``text``; never fails the run for the sake of its display.

    Characters the stream's encoding cannot hold become replacements; a closed or broken
    stream (the reader of a pipe went away, the terminal hung up) is ignored.
    """
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.encode(encoding, "replace").decode(encoding, "replace"))
    except (OSError, ValueError):
        pass


def flush_quietly(stream: IO[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.flush()


class PlainSink:
    """Text straight to the stream; styles and the status line are ignored."""

    __slots__ = ("_stream",)

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, parts: Parts) -> None:
        text = "".join(text for text, _ in parts)
        if text:
            safe_write(self._stream, text)
            flush_quietly(self._stream)

    def set_status(self, text: str | None, style: str | None = None) -> None:
        pass

    def stop_live(self) -> None:
        pass

    def close(self) -> None:
        flush_quietly(self._stream)


class RichSink:
    """rich output: colour, and on a terminal a live region (partial line + status)."""

    __slots__ = ("_console", "_live", "_partial", "_status")

    def __init__(self, stream: TextIO, *, width: int | None, live: bool) -> None:
        from rich.console import Console
        from rich.text import Text

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True  # the reader went away: stop drawing, keep the run going

        self._console: Console = _Console(
            file=stream,
            width=width,
            force_terminal=True,
            highlight=False,
            markup=False,
            emoji=False,
        )
        self._partial: Text = Text()
        self._status: Text | None = None
        self._live: Any = None
        if live:
            from rich.live import Live

            self._live = Live(
                self._region(),
                console=self._console,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
                vertical_overflow="visible",
            )
            self._live.start()

    @property
    def width(self) -> int:
        return int(self._console.width)

    def _region(self) -> Any:
        from rich.console import Group

        parts: list[Text] = []
        if self._partial:
            parts.append(self._partial)
        if self._status is not None:
            parts.append(self._status)
        return Group(*parts)

    def write(self, parts: Parts) -> None:
        """Styled text; finished lines are printed in one go, the rest joins the live line."""
        if not parts:
            return
        from rich.text import Text

        if self._live is None:
            line = Text()
            for text, style in parts:
                line.append(text, style)
            self._print(line, end="", soft_wrap=True)
            return
        done: list[Text] = []
        for text, style in parts:
            for index, piece in enumerate(text.split("\n")):
                if index:
                    done.append(self._partial)
                    self._partial = Text()
                if piece:
                    self._partial.append(piece, style)
        if not done:
            self._update(refresh=True)
            return
        # One write: the region redrawn without the finished lines, then the lines above it
        # (rich's Live only picks up a new region when it refreshes).
        with self._console:
            self._update(refresh=True)
            self._print(Text("\n").join(done))

    def _print(self, *objects: Any, **options: Any) -> None:
        try:
            self._console.print(*objects, **options)
        except (OSError, ValueError):
            self._console.quiet = True

    def set_status(self, text: str | None, style: str | None = None) -> None:
        if self._live is None:
            return
        from rich.text import Text

        self._status = None if text is None else Text(text, style=style or "", no_wrap=True)
        self._update(refresh=True)

    def _update(self, *, refresh: bool) -> None:
        if self._live is not None:
            try:
                self._live.update(self._region(), refresh=refresh)
            except (OSError, ValueError):
                self._console.quiet = True

    def stop_live(self) -> None:
        """Print the line being streamed, remove the status line and leave the live region."""
        live, self._live = self._live, None
        if live is None:
            return
        partial, self._partial = self._partial, self._partial.blank_copy()
        self._status = None
        live.update(self._region(), refresh=False)
        live.stop()
        if partial:
            self._print(partial, end="")

    def close(self) -> None:
        self.stop_live()
        flush_quietly(self._console.file)
