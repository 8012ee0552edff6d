"""The HTML sink draws exactly what the terminal display draws, escaped."""

from __future__ import annotations

import html
import re

from display_helpers import SAMPLE_RUN, WIDTH, replay

from tether.display.html import HtmlSink, open_html_display
from tether.display.replay import WireReplay


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_html_is_the_plain_view_with_styles() -> None:
    _, plain = replay(SAMPLE_RUN)
    display, sink = open_html_display(width=WIDTH)
    replayer = WireReplay(display)
    with SAMPLE_RUN.open("rb") as f:
        for line in f:
            replayer.line(line.rstrip(b"\n"))
    replayer.finish()
    display.close()
    fragment = sink.take()
    assert '<span class="s-' in fragment
    assert _text(fragment) == plain
    assert sink.take() == ""


def test_agent_text_cannot_inject_markup() -> None:
    sink = HtmlSink()
    sink.write([("<img src=x onerror=alert(1)> & done", None), ("<b>", "bold red")])
    out = sink.take()
    assert "<img" not in out
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; done" in out
    assert out.endswith('<span class="s-bold s-red">&lt;b&gt;</span>')
