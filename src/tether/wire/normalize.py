"""Display events bounded for transport (sans-IO: the caller passes the time).

``normalize`` turns a raw agent event (a dict with the wire's kebab-case keys) into a
display event whose fields have their schema types and whose payload fits the
transport budgets: each string at most 4096 bytes (cut on a UTF-8 boundary), at most
64 entries and depth 8 in all, 12 KiB of payload strings; ``summary`` is the first line
of the main text, at most 160 bytes. Anything cut sets ``transport-truncated?``. A record
still over 16 KiB once encoded is replaced by a small ``info`` record saying so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from tether.wire.limits import (
    DEPTH_LIMIT_TEXT,
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    PAYLOAD_BUDGET_BYTES,
    RECORD_BUDGET_BYTES,
    STRING_BUDGET_BYTES,
    SUMMARY_BYTES,
    TABLE_BUDGET_ENTRIES,
)
from tether.wire.text import cut_text, first_line_summary

META_KEYS = ("run-id", "agent", "requested-cwd", "cwd", "physical-cwd")
_ENCODE = msgspec.json.Encoder().encode


class _Budget:
    __slots__ = ("bytes", "entries", "truncated")

    def __init__(self) -> None:
        self.bytes = PAYLOAD_BUDGET_BYTES
        self.entries = TABLE_BUDGET_ENTRIES
        self.truncated = False


def summarize(value: object) -> str:
    """The first line of a value's text (JSON for non-strings), at most 160 bytes."""
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = _ENCODE(value).decode()
        except (TypeError, ValueError, OverflowError, UnicodeError):
            value = repr(value)
    return first_line_summary(value, SUMMARY_BYTES)


def _opt_str(value: object, budget: _Budget | None = None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        text, changed = cut_text(value, STRING_BUDGET_BYTES)
        if changed and budget is not None:
            budget.truncated = True
        return text
    return summarize(value)


def _opt_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if abs(value) <= MAX_SAFE_INTEGER else None


def _opt_pos_int(value: object) -> int | None:
    number = _opt_int(value)
    return number if number is not None and number >= 1 else None


def _opt_num(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def bounded_copy(value: object, budget: _Budget, depth: int = 0) -> object:
    """A JSON-safe copy of ``value`` within the budget, marking what was cut."""
    if depth > MAX_DEPTH:
        budget.truncated = True
        return DEPTH_LIMIT_TEXT
    if isinstance(value, str):
        limit = max(1, min(STRING_BUDGET_BYTES, budget.bytes))
        text, changed = cut_text(value, limit)
        budget.bytes = max(0, budget.bytes - len(text.encode()))
        budget.truncated |= changed
        return text
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        budget.truncated = True
        return None
    if isinstance(value, Mapping):
        return _copy_items(((str(k), v) for k, v in value.items()), budget, depth, {})
    if isinstance(value, list | tuple):
        return list(_copy_items(enumerate(value), budget, depth, {}).values())
    budget.truncated = True
    return bounded_copy(repr(value), budget, depth)


def _copy_items(
    items: Any, budget: _Budget, depth: int, out: dict[Any, object]
) -> dict[Any, object]:
    for key, item in items:
        if budget.entries <= 0 or budget.bytes <= 0:
            budget.truncated = True
            break
        budget.entries -= 1
        out[key] = bounded_copy(item, budget, depth + 1)
    return out


def _keep(out: dict[str, Any], key: str, value: object, budget: _Budget) -> None:
    if value is not None:
        out[key] = bounded_copy(value, budget)


def _text_event(out: dict[str, Any], ev: Mapping[str, Any], key: str, budget: _Budget) -> None:
    value = ev.get(key)
    text = value if isinstance(value, str) else _opt_str(value)
    _keep(out, key, text, budget)
    out["summary"] = summarize(text)


def _fill(kind: object, ev: Mapping[str, Any], out: dict[str, Any], budget: _Budget) -> None:
    get = ev.get
    if kind == "tool-call":
        out["name"] = _opt_str(get("name"), budget) or ""
        out["id"] = _opt_str(get("id"), budget)
        _keep(out, "arguments", get("arguments"), budget)
        out["summary"] = summarize(get("arguments"))
    elif kind == "tool-result":
        result = get("result")
        nested = result if isinstance(result, Mapping) else {}
        out["name"] = _opt_str(get("name"), budget) or ""
        out["id"] = _opt_str(get("id"), budget)
        out["tool-call-id"] = _opt_str(get("tool-call-id"), budget)
        out["duration-seconds"] = _opt_num(get("duration-seconds"))
        out["is-error?"] = bool(get("is-error?") or nested.get("is-error?"))
        _keep(out, "result", result, budget)
        out["summary"] = summarize(nested.get("content", result))
    elif kind in ("assistant-text", "assistant-thinking"):
        out["final?"] = bool(get("final?"))
        out["content-index"] = _opt_int(get("content-index"))
        _text_event(out, ev, "text", budget)
    elif kind in ("assistant-text-delta", "assistant-thinking-delta"):
        out["content-index"] = _opt_int(get("content-index"))
        _text_event(out, ev, "delta", budget)
    elif kind in ("user", "steering-injected", "follow-up-injected"):
        _text_event(out, ev, "text", budget)
        if kind != "user":
            out["ref"] = _opt_pos_int(get("ref"))
    else:
        _fill_other(kind, ev, out, budget)


def _fill_other(kind: object, ev: Mapping[str, Any], out: dict[str, Any], budget: _Budget) -> None:
    get = ev.get
    if kind == "assistant-stream-end":
        out["final?"] = bool(get("final?"))
    elif kind in ("llm-start", "agent-started"):
        out["provider"] = _opt_str(get("provider"), budget)
        out["model"] = _opt_str(get("model"), budget)
        if kind == "agent-started":
            out["cwd"] = _opt_str(get("cwd")) or out.get("cwd")
    elif kind == "llm-end":
        out["stop-reason"] = _opt_str(get("stop-reason"), budget)
        usage = get("usage")
        if isinstance(usage, Mapping):
            out["usage"] = bounded_copy(usage, budget)
    elif kind == "agent-turn-complete":
        out["status"] = _opt_str(get("status"), budget)
        out["summary"] = summarize(get("result") or get("error"))
        if get("error") is not None:
            out["error"] = summarize(get("error"))
    elif kind == "error":
        out["error"] = summarize(get("error") or get("text"))
        out["source"] = _opt_str(get("source"), budget)
    elif kind == "info":
        out["summary"] = summarize(get("summary") or get("text"))
        refs = get("refs")
        if isinstance(refs, list | tuple):
            out["refs"] = [r for r in map(_opt_pos_int, refs) if r is not None]
    else:
        out["summary"] = summarize({k: v for k, v in ev.items() if k != "type"})


def normalize(
    raw_event: Mapping[str, Any], *, now: str | None = None, meta: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A bounded display event (wire keys, no envelope) for ``raw_event``; never raises.

    ``now`` is the UTC timestamp to stamp (``2026-09-25T00:00:00Z``); ``meta`` may carry
    run-id, agent, requested-cwd, cwd and physical-cwd.
    """
    kind = raw_event.get("type") if isinstance(raw_event, Mapping) else None
    if not isinstance(raw_event, Mapping):
        raw_event = {}
    out: dict[str, Any] = {"type": kind if isinstance(kind, str) else "info"}
    if now is not None:
        out["timestamp"] = now
    if meta:
        for key in META_KEYS:
            value = _opt_str(meta.get(key))
            if value is not None:
                out[key] = value
    budget = _Budget()
    _fill(out["type"], raw_event, out, budget)
    if budget.truncated:
        out["transport-truncated?"] = True
    out = {k: v for k, v in out.items() if v is not None}
    return _within_record_budget(out, now)


def _within_record_budget(out: dict[str, Any], now: str | None) -> dict[str, Any]:
    try:
        size = len(_ENCODE(out))
    except (TypeError, ValueError, OverflowError, UnicodeError):
        size = RECORD_BUDGET_BYTES + 1
    if size <= RECORD_BUDGET_BYTES:
        return out
    info: dict[str, Any] = {"type": "info"}
    if now is not None:
        info["timestamp"] = now
    info["summary"] = f"{out['type']} payload omitted: transport record limit"
    info["transport-truncated?"] = True
    return info
