"""The approval desk's timers on a virtual clock (tests/support/clock.py): an approval's
timeout and default, an answer that comes before it, a question's timeout. No test here
waits: the loop's clock jumps to each timer, and when an answer comes is a time the test
names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.support.clock import run
from tests.support.waits import loop_pass
from tether.agent.desk import Desk, Request, Verdict
from tether.policy.config import DeskConfig

BASH = Request("builtin", "builtin", "bash", {"command": "touch made.txt"}, cwd="/tmp")


def _desk(tmp_path: Path, **config: object) -> Desk:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    return Desk(DeskConfig(ask=True, **config), inbox=run_dir / "inbox.jsonl")  # type: ignore[arg-type]


def _inbox(desk: Desk) -> list[dict[str, object]]:
    assert desk.inbox is not None
    return [json.loads(line) for line in desk.inbox.read_text().splitlines()]


def _answer_at(desk: Desk, at: float, decision: str) -> None:
    """Answer what waits, ``at`` seconds of the (virtual) clock from now."""

    def answer() -> None:
        (key,) = desk.waiting
        assert desk.resolve(key, decision, "the person's word")

    asyncio.get_running_loop().call_later(at, answer)


def test_an_approval_nobody_answers_takes_the_default_when_its_time_is_up(
    tmp_path: Path,
) -> None:
    desk = _desk(tmp_path, timeout_s=300.0, default="approve")

    async def main() -> tuple[Verdict, float]:
        loop = asyncio.get_running_loop()
        verdict = await desk.request(BASH)
        return verdict, loop.time()

    verdict, at = run(main())
    assert (verdict.decision, verdict.by) == ("approve", "timeout")
    assert at == 300.0  # the timer's own time, to the tick
    assert desk.waiting == []
    request = _inbox(desk)[0]
    assert (request["timeout_s"], request["default"]) == (300.0, "approve")


def test_an_answer_a_second_before_the_timeout_decides(tmp_path: Path) -> None:
    desk = _desk(tmp_path, timeout_s=300.0, default="approve")

    async def main() -> tuple[Verdict, float]:
        loop = asyncio.get_running_loop()
        asking = asyncio.ensure_future(desk.request(BASH))
        await loop_pass()  # it asks, and waits
        _answer_at(desk, 299.0, "deny")
        verdict = await asking
        return verdict, loop.time()

    verdict, at = run(main())
    assert (verdict.decision, verdict.by, verdict.text) == ("deny", "person", "the person's word")
    assert at == 299.0


def test_without_a_default_an_approval_waits_however_long(tmp_path: Path) -> None:
    desk = _desk(tmp_path, timeout_s=300.0)  # a timeout without a default is no timer

    async def main() -> Verdict:
        asking = asyncio.ensure_future(desk.request(BASH))
        await loop_pass()
        _answer_at(desk, 86_400.0, "approve")  # a day later
        return await asking

    verdict = run(main())
    assert (verdict.decision, verdict.by) == ("approve", "person")


def test_a_question_closes_when_its_time_is_up(tmp_path: Path) -> None:
    desk = _desk(tmp_path)

    async def main() -> tuple[tuple[str, str | None], float]:
        loop = asyncio.get_running_loop()
        got = await desk.question("Which branch?", 120.0)
        return got, loop.time()

    (key, answer), at = run(main())
    assert answer is None
    assert at == 120.0
    closed = _inbox(desk)[-1]
    assert closed == {"type": "question_closed", "key": key, "why": "no answer within 120 s"}


def test_a_question_answered_in_time_gets_its_answer(tmp_path: Path) -> None:
    desk = _desk(tmp_path)

    async def main() -> tuple[str, str | None]:
        asking = asyncio.ensure_future(desk.question("Which branch?", 120.0))
        await loop_pass()
        (key,) = desk.waiting
        asyncio.get_running_loop().call_later(119.0, desk.resolve, key, None, "main")
        return await asking

    _, answer = run(main())
    assert answer == "main"
