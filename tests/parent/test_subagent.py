"""The subagent tool: real child runs, several at once, depth and fan-out capped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from tests.support.waits import wait_until_async
from tether.agent.subagent import SubagentTool
from tether.agent.tools import ToolContext
from tether.runtime.parent.spawn import spawn
from tether.store.index import RunIndex

from .helpers import ENDLESS, Gate, double


def _context(tmp_path: Path, **env: str) -> ToolContext:
    base = dict(os.environ)
    base["TETHER_SUBAGENT_ARGV"] = json.dumps(double("normal", 100))
    base["FEN_WIRE_RUN_ID"] = "20261130T000000-parent"
    base.update(env)
    return ToolContext(cwd=tmp_path, env=base)


def test_subagent_returns_the_child_final_text_and_records_its_parent(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn)
    content, is_error = asyncio.run(tool.run({"task": "sum it up"}, _context(tmp_path)))
    assert (content, is_error) == ("answer: sum it up", False)
    (record,) = RunIndex().recent()
    assert record.parent_run == "20261130T000000-parent"
    assert record.status == "done"
    assert record.task == "sum it up"


def test_several_subagents_run_at_once(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn)
    context = _context(tmp_path)

    async def go() -> list[tuple[str, bool]]:
        calls = [tool.run({"task": f"part {i}"}, context) for i in range(3)]
        return list(await asyncio.gather(*calls))

    results = asyncio.run(go())
    assert results == [(f"answer: part {i}", False) for i in range(3)]
    assert len(RunIndex().children("20261130T000000-parent")) == 3


def test_fan_out_is_capped(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn, max_concurrent=2)
    gate = Gate(tmp_path / "gate")  # the two admitted runs work until it opens
    context = _context(tmp_path, TETHER_SUBAGENT_ARGV=json.dumps(double(gate=gate)))

    async def go() -> list[tuple[str, bool]]:
        runs = [asyncio.ensure_future(tool.run({"task": "t"}, context)) for _ in range(3)]
        await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)  # the refused one
        gate.open()
        return [await run for run in runs]

    results = asyncio.run(go())
    refused = [r for r in results if r[1]]
    assert len(refused) == 1
    assert "2 subagents are already running (the limit is 2)" in refused[0][0]
    assert sum(1 for r in results if r == ("answer: t", False)) == 2


def test_depth_is_capped_and_passed_down(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn, max_depth=2)
    content, is_error = asyncio.run(
        tool.run({"task": "t"}, _context(tmp_path, TETHER_SUBAGENT_DEPTH="2"))
    )
    assert is_error
    assert "nesting limit reached (this run is at depth 2, the limit is 2)" in content
    # a child started at depth 1 gets TETHER_SUBAGENT_DEPTH=2 in its environment
    probe = tmp_path / "probe.sh"
    probe.write_text('echo "$TETHER_SUBAGENT_DEPTH" > depth.txt; exec "$@"\n')
    argv = ["sh", str(probe), *double("normal", 50)]
    context = _context(tmp_path, TETHER_SUBAGENT_DEPTH="1", TETHER_SUBAGENT_ARGV=json.dumps(argv))
    content, is_error = asyncio.run(tool.run({"task": "t"}, context))
    assert not is_error
    assert (tmp_path / "depth.txt").read_text().strip() == "2"


def test_bad_arguments_are_error_results(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn)
    context = _context(tmp_path)
    for arguments in (
        {},
        {"task": ""},
        {"task": "t", "timeout_s": 0},
        {"task": "t", "timeout_s": "x"},
    ):
        content, is_error = asyncio.run(tool.run(arguments, context))
        assert is_error
        assert content.startswith("subagent: ")


def test_a_failing_child_is_an_error_result(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn)
    context = _context(tmp_path, TETHER_SUBAGENT_ARGV=json.dumps(double("die-mid-turn")))
    content, is_error = asyncio.run(tool.run({"task": "t"}, context))
    assert is_error
    assert content.startswith("subagent failed (run ")
    assert "boom: simulated crash" in content


def test_cancelling_the_tool_cancels_the_sub_run(tmp_path: Path) -> None:
    tool = SubagentTool(spawn=spawn)
    context = _context(tmp_path, TETHER_SUBAGENT_ARGV=json.dumps(double("normal", ENDLESS)))

    async def go() -> None:
        task = asyncio.create_task(tool.run({"task": "t"}, context))
        records = await wait_until_async(RunIndex().recent, "the sub-run's row")  # (polled)
        events = Path(records[0].run_dir, "events.jsonl")
        await wait_until_async(
            lambda: events.exists() and b'"type":"turn-started"' in events.read_bytes(),
            "the sub-run's turn",
            files=[events],
        )
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (record,) = RunIndex().recent()
    assert record.status == "cancelled"
