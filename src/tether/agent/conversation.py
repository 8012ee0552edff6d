"""The built-in agent's conversation on disk, saved as the run goes, read back to resume.

Theory of operation: every item the agent adds to its history (a user message, a model
call's assistant message, a tool's outcome) is appended at once to
``conversation.jsonl`` in the run directory, one JSON line each (0600, through
:class:`tether.fsafe.AppendFile`), so even a run that is SIGKILLed leaves its
conversation up to its last whole line. A later run resumes (or forks) from it:
:func:`load_conversation` reads it back, bounded and total (a bad line, a file too large
or the wrong kind of file is a refusal with a reason, never an exception), and
:func:`repaired` answers the tool calls the run never answered (it ended mid-tool), so
the history is one any provider takes. The new run writes the loaded items into its own
file first: every run's file holds its whole conversation.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import fsafe, jsondepth
from tether.agent.provider import (
    AssistantTurn,
    ConversationItem,
    TextBlock,
    ThinkingBlock,
    ToolOutcome,
    ToolUse,
    UserTurn,
)

__all__ = [
    "CONVERSATION_FILE",
    "CONVERSATION_LIMIT",
    "ConversationLog",
    "encode_item",
    "load_conversation",
    "repaired",
]

CONVERSATION_FILE: Final = "conversation.jsonl"
CONVERSATION_LIMIT: Final = 64 * 1024 * 1024  # bytes read back, at most
UNANSWERED_TOOL: Final = "not run: the run ended before this tool finished"


class _Text(msgspec.Struct, frozen=True, tag="text"):
    text: str


class _Thinking(msgspec.Struct, frozen=True, tag="thinking", omit_defaults=True):
    text: str
    signature: str | None = None


class _ToolUse(msgspec.Struct, frozen=True, tag="tool-use"):
    id: str
    name: str
    arguments: dict[str, Any]


class _User(msgspec.Struct, frozen=True, tag="user"):
    text: str


class _Assistant(msgspec.Struct, frozen=True, tag="assistant"):
    blocks: list[_Text | _Thinking | _ToolUse]


class _Outcome(msgspec.Struct, frozen=True, tag="tool-outcome"):
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


_Line = _User | _Assistant | _Outcome
_decoder = msgspec.json.Decoder(_Line)
_encoder = msgspec.json.Encoder()


def _block(block: TextBlock | ThinkingBlock | ToolUse) -> _Text | _Thinking | _ToolUse:
    if isinstance(block, TextBlock):
        return _Text(block.text)
    if isinstance(block, ThinkingBlock):
        return _Thinking(block.text, block.signature)
    return _ToolUse(block.id, block.name, block.arguments)


def encode_item(item: ConversationItem) -> bytes:
    """One history item as its JSON line (without the newline)."""
    if isinstance(item, UserTurn):
        return _encoder.encode(_User(item.text))
    if isinstance(item, AssistantTurn):
        return _encoder.encode(_Assistant([_block(b) for b in item.blocks]))
    return _encoder.encode(_Outcome(item.tool_call_id, item.name, item.content, item.is_error))


def _item(line: _Line) -> ConversationItem:
    if isinstance(line, _User):
        return UserTurn(line.text)
    if isinstance(line, _Outcome):
        return ToolOutcome(line.tool_call_id, line.name, line.content, line.is_error)
    blocks: list[TextBlock | ThinkingBlock | ToolUse] = []
    for block in line.blocks:
        if isinstance(block, _Text):
            blocks.append(TextBlock(block.text))
        elif isinstance(block, _Thinking):
            blocks.append(ThinkingBlock(block.text, block.signature))
        else:
            blocks.append(ToolUse(block.id, block.name, block.arguments))
    return AssistantTurn(tuple(blocks))


def load_conversation(
    path: str | os.PathLike[str], *, limit: int = CONVERSATION_LIMIT
) -> list[ConversationItem] | str:
    """The conversation saved at ``path``, or why it cannot be read (a reason).

    A last line without its newline (the run was killed while writing it) is left out;
    any other bad line refuses the whole file, with its number."""
    try:
        fd = fsafe.open_path(path, os.O_RDONLY)
        try:
            data = fsafe.read_all(fd, limit)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"cannot read the saved conversation {os.fspath(path)}: {exc.strerror or exc}"
    lines = data.split(b"\n")
    items: list[ConversationItem] = []
    for number, raw in enumerate(lines[:-1], 1):  # the last piece has no newline
        if not raw.strip():
            continue
        try:
            items.append(_item(jsondepth.decode(_decoder, raw)))
        except msgspec.DecodeError as exc:
            return f"the saved conversation {os.fspath(path)} has a bad line {number}: {exc}"
    return items


def repaired(items: Sequence[ConversationItem]) -> list[ConversationItem]:
    """``items`` with an outcome for every tool call that has none, right after it."""
    answered = {i.tool_call_id for i in items if isinstance(i, ToolOutcome)}
    out: list[ConversationItem] = []
    for item in items:
        out.append(item)
        if isinstance(item, AssistantTurn):
            for block in item.blocks:
                if isinstance(block, ToolUse) and block.id not in answered:
                    out.append(ToolOutcome(block.id, block.name, UNANSWERED_TOOL, True))
                    answered.add(block.id)
    return out


class ConversationLog:
    """The run's ``conversation.jsonl``, created (0600, exclusively) and kept open for
    appending; a write that fails is reported once and not retried (the run goes on)."""

    def __init__(self, path: Path, items: Iterable[ConversationItem] = ()) -> None:
        self.path = path
        self.error: str | None = None
        self.items = list(items)  # what it started with (a resumed conversation)
        os.close(fsafe.open_path(path, os.O_WRONLY, create=True))  # 0600, exclusively
        self._file: fsafe.AppendFile | None = fsafe.AppendFile(path)
        for item in self.items:
            self.append(item)

    def append(self, item: ConversationItem) -> None:
        if self._file is None:
            return
        try:
            self._file.append(encode_item(item))
        except OSError as exc:
            self.error = f"cannot save the conversation to {self.path}: {exc}"
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
