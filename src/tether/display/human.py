"""The human renderer: display messages drawn for a person.

Theory of operation: everything arrives as a display message (or a notice, user input,
inbox message, status or final answer) for a run at a depth. Text and thinking are
streamed as they come; every other kind is a short block of whole lines. A streamed block
stays open until something else is drawn, which first ends the open line, so output of
different kinds and runs never shares a line. Nested runs (depth >= 1) are indented under
a ``┌ run`` header printed whenever output switches to them.

Every string that came from an agent is passed through :mod:`tether.display.sanitize`
before it is drawn, and one-line items are cut to the width. The output goes through a
sink (:mod:`tether.display.sinks`): plain text, or rich with colour and a live status line.
What is drawn depends only on the messages, so replaying a run draws what was drawn live.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TextIO

import msgspec

from tether.display.boundary import FailedToolResult, Item, Notice, UserInput
from tether.display.layout import cells, duration, fit, usage_counts, usage_text
from tether.display.sanitize import StreamSanitizer, sanitize
from tether.display.sinks import Sink, flush_quietly, safe_write
from tether.framing import messages as kinds

if TYPE_CHECKING:
    from tether.wire import AnyEvent

NEST: Final = "│ "
THINK: Final = "┊ "
RESULT_HEAD_LINES: Final = 8
RESULT_TAIL_LINES: Final = 4
USER_LINES: Final = 3
ERROR_LINES: Final = 10
NOTICE_LINES: Final = 40
_NORMAL_STOPS: Final = frozenset({"end_turn", "stop", "tool_use", "tool-use", "toolUse"})
_NOTICE_GLYPH: Final = {"info": ("i", "cyan"), "warning": ("!", "yellow"), "error": ("✗", "red")}

Parts = list[tuple[str, str | None]]


def _lines(text: str, limit: int) -> tuple[list[str], int]:
    """The first ``limit`` lines of ``text`` (tabs expanded) and how many were left out."""
    lines = text.expandtabs(4).split("\n")
    if len(lines) <= limit:
        return lines, 0
    return lines[:limit], len(lines) - limit


def compact_json(value: object) -> str:
    """One-line JSON (or the text itself) for showing arguments and inbox payloads."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)


class HumanRenderer:
    """Draws display messages through a sink. Not thread-safe: one writer at a time."""

    def __init__(
        self,
        sink: Sink,
        *,
        width: int,
        answer: TextIO,
        answer_is_tty: bool,
        live: bool,
    ) -> None:
        self._sink = sink
        self._width = max(width, 20)
        self._answer = answer
        self._answer_is_tty = answer_is_tty
        self._live = live
        self._at_line_start = True
        self._block: tuple[str, str] | None = None  # (run, kind) of the open streamed block
        self._block_prefix: Parts = []
        self._sanitizer = StreamSanitizer()
        self._run: str | None = None
        self._top_runs: set[str] = set()  # top-level runs seen; with several, each gets a header
        self._pending_usage: tuple[str, int, str] | None = None
        self._state: str | None = None
        self._elapsed = 0.0
        self._note: str | None = None
        self._progress: str | None = None
        self._stopped: tuple[str, str] | None = None  # (run, reason) of a STOP just drawn

    # -- low level -------------------------------------------------------------------------

    def _write(self, parts: Parts) -> None:
        self._sink.write([part for part in parts if part[0]])

    def _prefix(self, depth: int) -> Parts:
        return [(NEST * depth, "dim")] if depth > 0 else []

    def _end_block(self) -> None:
        if self._block is not None:
            rest = self._sanitizer.flush()
            if rest:
                self._stream_text(rest, self._block_style())
            self._block = None
        if not self._at_line_start:
            self._write([("\n", None)])
            self._at_line_start = True

    def _block_style(self) -> str | None:
        return "dim italic" if self._block is not None and self._block[1] == "thinking" else None

    def _settle(self) -> None:
        """Before a block of whole lines: end the open line and any held usage line."""
        self._end_block()
        if self._pending_usage is not None:
            _, depth, text = self._pending_usage
            self._pending_usage = None
            self._line(self._prefix(depth), [("· " + text, "dim")])

    def _enter(self, run: str, depth: int) -> None:
        """Note which run is drawing; a header marks a switch to a nested run, or between
        top-level runs when one display shows several at once (``tether demo``)."""
        if run == self._run:
            return
        previous, self._run = self._run, run
        if depth > 0:
            self._settle()
            self._line(self._prefix(depth - 1), [("┌ ", "dim"), (sanitize(run), "bold")])
            return
        self._top_runs.add(run)
        if len(self._top_runs) > 1 and previous is not None:
            self._settle()
            self._line([], [("━ ", "dim"), (sanitize(run), "bold")])

    def _line(self, prefix: Parts, parts: Parts) -> None:
        """One whole line: prefix plus parts, cut to the width. Parts must be single-line."""
        room = self._width - sum(cells(text) for text, _ in prefix)
        out: Parts = list(prefix)
        for text, style in parts:
            if room <= 0:
                break
            cut = fit(text, room)
            out.append((cut, style))
            room -= cells(cut)
            if cut != text:
                break
        out.append(("\n", None))
        self._write(out)

    def _block_lines(self, prefix: Parts, text: str, style: str | None, limit: int) -> None:
        lines, left = _lines(text, limit)
        for line in lines:
            self._line(prefix, [(line, style)])
        if left:
            self._line(prefix, [(f"… {left} more lines", "dim")])

    # -- streamed blocks ---------------------------------------------------------------------

    def _stream(self, run: str, depth: int, kind: str, chunk: str) -> None:
        if self._block != (run, kind):
            self._settle()
            self._block = (run, kind)
            self._block_prefix = self._prefix(depth)
            if kind == "thinking":
                self._block_prefix.append((THINK, "dim"))
        text = self._sanitizer.feed(chunk)
        if text:
            self._stream_text(text, self._block_style())

    def _stream_text(self, text: str, style: str | None) -> None:
        parts: Parts = []
        for index, piece in enumerate(text.split("\n")):
            if index:
                parts.append(("\n", None))
                self._at_line_start = True
            if piece:
                if self._at_line_start:
                    parts += self._block_prefix
                parts.append((piece.expandtabs(4) if "\t" in piece else piece, style))
                self._at_line_start = False
        self._write(parts)

    # -- dispatch -----------------------------------------------------------------------------

    def raw(self, event: AnyEvent, raw: bytes | None, *, run: str, depth: int) -> bool:
        return False

    def item(self, item: Item, *, run: str, depth: int) -> None:
        """Draw one display message, user input or notice.

        A STOP right after a STOP with the same reason adds nothing (bash-agent writes
        ``STOP end_turn`` twice per answer; its display draws a STOP as a line end).
        Records (``session_start``, ``sub_agent_start``, ...) and SESSION_END draw nothing,
        as in bash-agent's display.
        """
        stopped, self._stopped = self._stopped, None
        if isinstance(item, kinds.Stop):
            self._stopped = (run, item.reason)
            if stopped == self._stopped:
                return
        if isinstance(item, UserInput):
            self.user_input(item.kind, item.text, run=run, depth=depth)
        elif isinstance(item, Notice):
            self.notice(item.text, level=item.level, depth=depth)
        elif isinstance(item, kinds.UserInputFrame | kinds.UserMessage):
            self.user_input("user", item.text, run=run, depth=depth)
        elif isinstance(item, kinds.ImageDescribe):
            self.image_describe(item.images, item.description, run=run, depth=depth)
        else:
            self._message(item, run=run, depth=depth)

    def _message(self, item: Item, *, run: str, depth: int) -> None:
        if isinstance(item, kinds.Text):
            self.text(item.chunk, run=run, depth=depth)
        elif isinstance(item, kinds.Thinking):
            self.thinking(item.chunk, run=run, depth=depth)
        elif isinstance(item, kinds.ToolCall):
            self.tool_call(item.name, item.input, run=run, depth=depth)
        elif isinstance(item, kinds.ToolResult):
            failed = isinstance(item, FailedToolResult)
            self.tool_result(item.tool_name, item.output, is_error=failed, run=run, depth=depth)
        elif isinstance(item, kinds.Usage):
            self.usage(msgspec.structs.asdict(item), run=run, depth=depth)
        elif isinstance(item, kinds.Stop):
            self.stop(item.reason, run=run, depth=depth)
        elif isinstance(item, kinds.ContextUpdate):
            self.context_update(item.kind, item.trigger, run=run, depth=depth)
        elif isinstance(item, kinds.Error):
            self.error(item.message, run=run, depth=depth)
        elif isinstance(item, kinds.Retry):
            self.retry(run=run, depth=depth)
        elif isinstance(item, kinds.SubAgentResult | kinds.AgentResult):
            self.sub_agent_result(
                item.session_id,
                item.status,
                item.input_tokens,
                item.output_tokens,
                item.text,
                run=run,
                depth=depth,
            )

    # -- message kinds ------------------------------------------------------------------------

    def text(self, chunk: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._stream(run, depth, "text", chunk)

    def thinking(self, chunk: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._stream(run, depth, "thinking", chunk)

    def tool_call(self, name: str, arguments: object, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        args = sanitize(compact_json(arguments)).replace("\n", " ") if arguments else ""
        parts: Parts = [("→ ", "cyan"), (sanitize(name), "bold cyan")]
        if args:
            parts.append((" " + args, "dim"))
        self._line(self._prefix(depth), parts)

    def tool_result(self, name: str, output: str, *, is_error: bool, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        body = sanitize(output).rstrip("\n")
        lines = body.split("\n") if body else []
        parts: Parts = [("← ", "red" if is_error else "green"), (sanitize(name), "bold")]
        if is_error:
            parts.append((" failed", "bold red"))
        parts.append((f" ({len(lines)} line{'' if len(lines) == 1 else 's'})", "dim"))
        prefix = self._prefix(depth)
        self._line(prefix, parts)
        inner = [*prefix, ("  ", None)]
        if len(lines) > RESULT_HEAD_LINES + RESULT_TAIL_LINES:
            omitted = len(lines) - RESULT_HEAD_LINES - RESULT_TAIL_LINES
            shown = lines[:RESULT_HEAD_LINES]
            tail = lines[-RESULT_TAIL_LINES:]
        else:
            omitted, shown, tail = 0, lines, []
        for line in shown:
            self._line(inner, [(line.expandtabs(4), "red" if is_error else None)])
        if omitted:
            self._line(inner, [(f"… {omitted} lines omitted …", "dim")])
            for line in tail:
                self._line(inner, [(line.expandtabs(4), "red" if is_error else None)])

    def usage(self, usage: Mapping[str, object], *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        text = usage_text(usage)
        if text:
            self._pending_usage = (run, depth, text)

    def stop(self, reason: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        pending = self._pending_usage
        usage = None
        if pending is not None and pending[0] == run:
            usage, self._pending_usage = pending[2], None
        self._settle()
        reason = sanitize(reason).replace("\n", " ")
        style = "dim" if reason in _NORMAL_STOPS else "yellow"
        parts: Parts = [("· ", "dim"), (reason or "stop", style)]
        if usage:
            parts.append((" · " + usage, "dim"))
        self._line(self._prefix(depth), parts)

    def context_update(self, kind: str, trigger: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        text = f"↺ context {sanitize(kind)}" + (f" ({sanitize(trigger)})" if trigger else "")
        self._line(self._prefix(depth), [(text.replace("\n", " "), "magenta")])

    def error(self, message: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        lines, left = _lines(sanitize(message) or "error", ERROR_LINES)
        prefix = self._prefix(depth)
        self._line(prefix, [("✗ ", "bold red"), (lines[0], "red")])
        for line in lines[1:]:
            self._line([*prefix, ("  ", None)], [(line, "red")])
        if left:
            self._line([*prefix, ("  ", None)], [(f"… {left} more lines", "dim")])

    def image_describe(self, images: str, description: str, *, run: str, depth: int) -> None:
        if not description:
            return
        self._enter(run, depth)
        self._settle()
        lines, left = _lines(sanitize(description).strip("\n"), USER_LINES)
        prefix = self._prefix(depth)
        self._line(prefix, [("📸 ", None), (f"{sanitize(images)}: ", "cyan"), (lines[0], None)])
        for line in lines[1:]:
            self._line([*prefix, ("  ", None)], [(line, None)])
        if left:
            self._line([*prefix, ("  ", None)], [(f"… {left} more lines", "dim")])

    def retry(self, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        self._line(self._prefix(depth), [("↻ retrying", "yellow")])

    def sub_agent_result(
        self,
        session_id: str,
        status: str,
        input_tokens: int,
        output_tokens: int,
        text: str,
        *,
        run: str,
        depth: int,
    ) -> None:
        self._settle()
        self._run = None
        prefix = self._prefix(max(depth - 1, 0))
        ok = status == "ok"
        parts: Parts = [
            ("└ ", "dim"),
            (sanitize(session_id), "bold"),
            (" " + sanitize(status), "green" if ok else "bold red"),
            (f" · {input_tokens} in · {output_tokens} out", "dim"),
        ]
        self._line(prefix, parts)
        summary = sanitize(text).strip().split("\n", 1)[0]
        if summary:
            self._line([*prefix, ("  ", None)], [(summary, "dim")])

    def user_input(self, kind: str, text: str, *, run: str, depth: int) -> None:
        self._enter(run, depth)
        self._settle()
        lines, left = _lines(sanitize(text).strip("\n"), USER_LINES)
        prefix = self._prefix(depth)
        self._line(prefix, [("» ", "bold blue"), (f"{kind}: ", "blue"), (lines[0], None)])
        for line in lines[1:]:
            self._line([*prefix, ("  ", None)], [(line, None)])
        if left:
            self._line([*prefix, ("  ", None)], [(f"… {left} more lines", "dim")])

    # -- out-of-band ---------------------------------------------------------------------------

    def notice(self, text: str, *, level: str = "info", depth: int = 0) -> None:
        self._settle()
        glyph, style = _NOTICE_GLYPH.get(level, _NOTICE_GLYPH["info"])
        lines, left = _lines(sanitize(text), NOTICE_LINES)
        prefix = self._prefix(depth)
        first = [*prefix, (glyph + " ", f"bold {style}"), (lines[0], style), ("\n", None)]
        self._write(first)
        for line in lines[1:]:
            self._write([*prefix, ("  " + line, style), ("\n", None)])
        if left:
            self._line([*prefix, ("  ", None)], [(f"… {left} more lines", "dim")])

    def status(self, *, state: str, elapsed_s: float, note: str | None = None) -> None:
        state = sanitize(state).replace("\n", " ")
        note = None if note is None else sanitize(note).replace("\n", " ")
        changed = state != self._state
        self._state, self._elapsed = state, elapsed_s
        if note is not None:
            self._note = note
        if self._live:
            self._show_status()
        elif changed:
            self._settle()
            parts: Parts = [("· ", "dim"), (state, "bold"), (f" ({duration(elapsed_s)})", "dim")]
            if note:
                parts.append((": " + note, None))
            self._line([], parts)

    def _show_status(self) -> None:
        text = f"● {self._state or 'running'} · {duration(self._elapsed)}"
        if self._note:
            text += f" · {self._note}"
        self._sink.set_status(fit(text, self._width - 1), "bold")

    def inbox(self, message: Mapping[str, Any], *, run: str, depth: int) -> None:
        kind = message.get("type")
        kind = kind if isinstance(kind, str) else "?"
        rest = {k: v for k, v in message.items() if k != "type"}
        if kind == "progress":
            text = sanitize(compact_json(message.get("text", rest))).replace("\n", " ")
            if self._live:
                self._note = text
                self._show_status()
            elif text != self._progress:
                self._progress = text
                self._enter(run, depth)
                self._settle()
                self._line(self._prefix(depth), [("· progress: ", "dim"), (text, None)])
            return
        self._enter(run, depth)
        if kind == "clarification":
            body = message.get("q", rest)
            self.notice(f"{run} asks: {compact_json(body)}", level="warning", depth=depth)
        elif kind == "approval_request":
            body = message.get("reason", rest)
            self.notice(
                f"{run} asks for approval: {compact_json(body)}", level="warning", depth=depth
            )
        else:
            self._settle()
            payload = sanitize(compact_json(rest)).replace("\n", " ")
            parts: Parts = [("✉ ", "dim"), (sanitize(kind), "bold"), (" " + payload, "dim")]
            self._line(self._prefix(depth), parts)

    def final(
        self,
        *,
        status: str,
        final_text: str,
        usage: Mapping[str, object] | None,
        truncated: bool,
        elapsed_s: float,
    ) -> None:
        self._settle()
        self._sink.stop_live()
        self._live = False
        words = [sanitize(status).replace("\n", " "), duration(elapsed_s)]
        words += [f"{count} {label}" for label, count in usage_counts(usage)]
        if truncated:
            words.append("answer truncated")
        label = "── " + " · ".join(words) + " "
        rule = label + "─" * max(self._width - cells(label), 2)
        ok = status in ("done", "ok")
        self._write([(fit(rule, self._width), "green" if ok else "bold red"), ("\n", None)])
        self._sink.close()
        text = sanitize(final_text) if self._answer_is_tty else final_text
        if text:
            safe_write(self._answer, text if text.endswith("\n") else text + "\n")
            flush_quietly(self._answer)

    def close(self) -> None:
        self._settle()
        self._sink.close()
