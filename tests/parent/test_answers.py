"""``RunHandle.answer``: the built-in agent's ``ask`` tool blocks its turn until the parent
answers the question from the inbox; the answer is recorded beside the question."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether.inbox.answers import AnswerRefused
from tether.inbox.store import open_store
from tether.runtime.parent.spawn import InboxItem, RunEvent, spawn


def _script(tmp_path: Path, *replies: dict[str, object]) -> str:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(list(replies)))
    return str(path)


def test_ask_blocks_until_the_parent_answers(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        {"tool_calls": [{"name": "ask", "arguments": {"question": "Which colour?"}}]},
        {"text": "Painting it."},
    )

    async def go() -> tuple[list[str], str, str]:
        handle = await spawn(
            "paint", provider="scripted", child_args=["--script", script], cwd=tmp_path
        )
        results: list[str] = []
        async for update in handle.updates():
            if isinstance(update, InboxItem) and update.message.get("type") == "clarification":
                assert update.message["q"] == "Which colour?"
                assert update.message["msg_key"].startswith(handle.run_id + ":")
                ack = await handle.answer(update.message, "blue")
                assert ack.status == "applied"  # an answer control, not a steer
                with pytest.raises(AnswerRefused, match="answered already"):
                    await handle.answer(_only_key(handle.run_id, tmp_path), "red")
                with pytest.raises(AnswerRefused, match="answered already"):
                    await handle.answer(update.message, "red")
                as_written = {k: v for k, v in update.message.items() if k != "msg_key"}
                with pytest.raises(AnswerRefused, match="no unanswered"):
                    await handle.answer(as_written, "red")
            elif isinstance(update, RunEvent) and type(update.event).__name__ == "ToolResult":
                results.append(str(update.event.result))  # type: ignore[attr-defined]
        result = await handle.wait()
        return results, result.final_text, handle.run_id

    results, final, run_id = asyncio.run(go())
    assert any("answer: blue" in text for text in results)
    assert final == "Painting it."
    with open_store(tmp_path / "home" / "tether.db") as store:
        answers = store.answers(run_id)
    assert [a["answer"] for a in answers.values()] == ["blue"]
    assert all(isinstance(a["seq"], int) for a in answers.values())


def _only_key(run_id: str, tmp_path: Path) -> str:
    with open_store(tmp_path / "home" / "tether.db") as store:
        return next(iter(store.answers(run_id)))


def test_ask_times_out_and_says_so(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        {"tool_calls": [{"name": "ask", "arguments": {"question": "Anyone?", "timeout_s": 0.2}}]},
        {"text": "Going on alone."},
    )

    async def go() -> list[str]:
        handle = await spawn(
            "alone", provider="scripted", child_args=["--script", script], cwd=tmp_path
        )
        results = [
            str(update.event.result)  # type: ignore[attr-defined]
            async for update in handle.updates()
            if isinstance(update, RunEvent) and type(update.event).__name__ == "ToolResult"
        ]
        assert (await handle.wait()).final_text == "Going on alone."
        return results

    results = asyncio.run(go())
    assert any("no answer within 0.2 s" in text for text in results)


def test_a_child_without_the_answer_control_gets_the_answer_as_a_steer(tmp_path: Path) -> None:
    from .helpers import double

    async def go() -> tuple[str, str]:
        handle = await spawn("long task", argv=double("normal", 3000), cwd=tmp_path)
        question = {"type": "clarification", "q": "Which colour?"}
        with (handle.run_dir.path / "inbox.jsonl").open("a") as inbox:
            inbox.write(json.dumps(question) + "\n")
        async for update in handle.updates():
            if isinstance(update, InboxItem) and update.message.get("type") == "clarification":
                ack = await handle.answer(update.message, "blue")
                assert ack.status == "accepted"  # the steer, after the answer was refused
                break
        result = await handle.wait()
        return result.final_text, handle.run_id

    final, run_id = asyncio.run(go())
    assert f"[tether answer {run_id}:0]" in final
    assert "Answer: blue" in final
