"""The human display rendered as HTML: a sink for :class:`~tether.display.human.HumanRenderer`.

Theory of operation: the dashboard shows an agent's events through the same rules as the
terminal. :func:`open_html_display` builds a :class:`~tether.display.Display` whose human
renderer writes into an :class:`HtmlSink` instead of a terminal: every styled piece of text
becomes escaped HTML (``<span class="s-bold s-cyan">``), newlines stay newlines (the page
shows the fragments in a ``white-space: pre-wrap`` block). :meth:`HtmlSink.take` hands out
what the last events produced, so a caller feeds one event, takes its fragment, sends it on.
No colours are decided here: the page's stylesheet maps the ``s-*`` classes.
"""

from __future__ import annotations

import html
import io
from typing import Final

from tether.display import DEFAULT_WIDTH, Display
from tether.display.sinks import Parts

CLASS_PREFIX: Final = "s-"


class HtmlSink:
    """Collects styled text as HTML fragments; see the module docstring."""

    __slots__ = ("_out", "status")

    def __init__(self) -> None:
        self._out: list[str] = []
        self.status: str | None = None

    def write(self, parts: Parts) -> None:
        for text, style in parts:
            if not text:
                continue
            escaped = html.escape(text, quote=False)
            if style:
                classes = " ".join(CLASS_PREFIX + word for word in style.split())
                self._out.append(f'<span class="{classes}">{escaped}</span>')
            else:
                self._out.append(escaped)

    def set_status(self, text: str | None, style: str | None = None) -> None:
        self.status = text

    def stop_live(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> str:
        """The HTML written since the last call."""
        out, self._out = "".join(self._out), []
        return out


def open_html_display(width: int = DEFAULT_WIDTH) -> tuple[Display, HtmlSink]:
    """A human display drawing into a fresh :class:`HtmlSink` (no terminal, no live region)."""
    from tether.display.human import HumanRenderer

    sink = HtmlSink()
    renderer = HumanRenderer(
        sink, width=width, answer=io.StringIO(), answer_is_tty=False, live=False
    )
    return Display(renderer), sink


__all__ = ["HtmlSink", "open_html_display"]
