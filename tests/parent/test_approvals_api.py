"""The Python API's approvals with the built-in agent (``approval="ask"``): requests handed
out as they come (async and blocking), answered with approve / deny, and the run's result
listing what was denied and by whom; bad approval options are refused before a run starts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import tether
from tests.support.gates import ToolGate
from tether.errors import BadOptions
from tether.inbox.answers import AnswerRefused


def _script(tmp_path: Path, *commands: str) -> str:
    calls = [
        {"text": f"Step {n}.", "tool_calls": [{"name": "bash", "arguments": {"command": c}}]}
        for n, c in enumerate(commands)
    ]
    path = tmp_path / "script.json"
    path.write_text(json.dumps([*calls, {"text": "All done."}]))
    return str(path)


def _options(tmp_path: Path, *commands: str) -> dict[str, object]:
    return {
        "provider": "scripted",
        "script": _script(tmp_path, *commands),
        "cwd": str(tmp_path),
        "db": tmp_path / "tether.db",
        "runs_root": tmp_path / "runs",
    }


def test_approvals_come_as_they_come_and_a_deny_is_in_the_result(tmp_path: Path) -> None:
    async def go() -> tether.RunResult:
        handle = await tether.spawn(
            "make it", approval="ask", **_options(tmp_path, "touch made.txt")
        )
        seen = []
        async for approval in handle.approvals():
            seen.append(approval)
            assert (approval.agent, approval.tool, approval.kind) == ("builtin", "bash", "shell")
            assert approval.summary == "touch made.txt"
            assert approval.input == {"command": "touch made.txt"}
            assert approval.key.startswith(handle.run_id + ":")
            assert not (tmp_path / "made.txt").exists()
            ack = await approval.deny("not today")
            assert ack.status == "applied"
            with pytest.raises(AnswerRefused, match="answered already"):
                await approval.approve()
        assert len(seen) == 1
        return await handle.wait()

    result = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "All done."
    assert not (tmp_path / "made.txt").exists()
    (denial,) = result.denied
    assert (denial.tool, denial.summary, denial.by, denial.text) == (
        "bash",
        "touch made.txt",
        "person",
        "not today",
    )


def test_blocking_approvals_and_always_for_the_kind(tmp_path: Path) -> None:
    options = _options(tmp_path, "touch one.txt", "touch two.txt")
    with tether.open_run("make both", approval="ask", **options) as run:
        asked = []
        for approval in run.approvals():
            asked.append(approval.summary)
            assert approval.approve(always=True).status == "applied"
        result = run.wait()
    assert asked == ["touch one.txt"]  # the second call was approved by the answer "always"
    assert result.status == "done", result.error
    assert (tmp_path / "one.txt").exists()
    assert (tmp_path / "two.txt").exists()
    assert result.denied == ()


def test_a_rule_denies_without_asking_and_says_which(tmp_path: Path) -> None:
    result = tether.run(
        "make it", deny=["shell:touch *"], approval="ask", **_options(tmp_path, "touch x")
    )
    assert result.status == "done", result.error
    assert not (tmp_path / "x").exists()
    (denial,) = result.denied
    assert (denial.by, denial.rule, denial.key) == ("rule", "shell:touch *", None)


def test_no_one_to_ask_denies_at_once(tmp_path: Path) -> None:
    result = tether.run(
        "make it", approval="ask", no_one_to_ask="a batch job", **_options(tmp_path, "touch x")
    )
    assert not (tmp_path / "x").exists()
    (denial,) = result.denied
    assert (denial.by, denial.text) == ("no-one", "a batch job")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"approval_timeout_s": 5}, "go together"),
        ({"approval_default": "deny"}, "go together"),
        ({"approve": ["sh ell"]}, "not a kind"),
        ({"policy": "/nonexistent/policy.toml"}, "cannot read the policy file"),
        ({"approval": "maybe"}, "approval must be"),
    ],
)
def test_bad_approval_options_are_refused_before_the_run(
    tmp_path: Path, fields: dict[str, object], words: str
) -> None:
    with pytest.raises(BadOptions, match=words):
        tether.run("x", **{**_options(tmp_path), **fields})
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_a_policy_file_decides(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('approve = ["shell:touch *"]\ndeny = ["shell:rm *"]\n')
    result = tether.run(
        "make it", approval="ask", policy=str(policy), **_options(tmp_path, "touch y", "rm y")
    )
    assert result.status == "done", result.error
    assert (tmp_path / "y").exists()
    assert [(d.by, d.rule) for d in result.denied] == [("rule", "shell:rm *")]


def test_approval_flags_go_to_tether_child_never_to_the_agents_command() -> None:
    from tether.runtime.parent.command import child_command
    from tether.runtime.parent.options import SpawnOptions

    program = "/bin/sh"  # an ACP agent's command (any program found: nothing is started)
    options = SpawnOptions(agent="acp", argv=(program,), approve=("read",))
    argv = child_command(options).argv
    assert argv.index("--approve=read") < argv.index("--") < argv.index(program)
    with pytest.raises(BadOptions, match="not argv"):
        child_command(SpawnOptions(argv=("my-wire-child",), deny=("shell",)))
    bare = child_command(SpawnOptions(argv=("my-wire-child",), no_one_to_ask="tether.run()"))
    assert bare.argv == ["my-wire-child"]  # what tether.run() sets: nothing to pass on


def test_tether_run_cannot_answer_so_it_never_waits(tmp_path: Path) -> None:
    result = tether.run("make it", approval="ask", **_options(tmp_path, "touch x"))
    assert result.status == "done", result.error
    assert not (tmp_path / "x").exists()
    (denial,) = result.denied
    assert denial.by == "no-one"
    assert "tether.run() cannot answer approvals" in denial.text


def test_a_queued_follow_up_is_listed_and_withdrawn(
    tmp_path: Path, tool_gate: Callable[[Path], ToolGate]
) -> None:
    from tether.runtime.parent.spawn import RunEvent

    gate = tool_gate(tmp_path / "go")
    options = _options(tmp_path, gate.command)

    async def go() -> list[str]:
        handle = await tether.spawn("work", **options)
        updates = handle.updates()
        async for update in updates:
            if isinstance(update, RunEvent) and type(update.event).__name__ == "ToolCall":
                break
        ack = await handle.follow_up("NEVER TO BE SEEN")
        assert ack.status == "accepted"
        (queued,) = handle.queued()
        assert (queued.ref, queued.kind, queued.text) == (ack.ref, "follow-up", "NEVER TO BE SEEN")
        assert (await handle.unqueue(queued.ref)).status == "applied"
        assert handle.queued() == []
        again = await handle.unqueue(queued.ref)
        assert (again.status, again.reason) == ("rejected", f"control {ack.ref} was withdrawn")
        gate.open()
        kinds = [type(u.event).__name__ async for u in updates if isinstance(u, RunEvent)]
        assert (await handle.wait()).final_text == "All done."
        return kinds

    kinds = asyncio.run(go())
    assert "FollowUpInjected" not in kinds
