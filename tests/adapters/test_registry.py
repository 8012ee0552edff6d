"""The agent registry: one table of agent kinds, and the capability docs generated from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.agents import markdown
from tether.runtime.child.adapters.commands import ModelTwice, cli_launch
from tether.runtime.child.adapters.registry import (
    AGENTS,
    CONTROLS,
    AgentKind,
    Support,
    UnknownAgent,
    agent_child_args,
    find_command,
    resolve_agent,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def test_every_agent_says_what_every_control_does() -> None:
    for agent in AGENTS.values():
        assert tuple(agent.controls) == CONTROLS, agent.name
        for control, cap in agent.controls.items():
            assert isinstance(cap.support, Support)
            assert cap.how.strip(), (agent.name, control)
        assert agent.name == "builtin" or agent.runner, agent.name


def test_the_issue_names_are_all_there() -> None:
    assert {"builtin", "claude", "codex", "pi", "gemini", "acp", "resp", "bash-agent"} <= set(
        AGENTS
    )


def test_resolve_agent_reads_fno_agents_provider_as_a_synonym() -> None:
    assert resolve_agent(None) == "builtin"
    assert resolve_agent(None, "claude") == "claude"
    assert resolve_agent(None, "codex") == "codex"
    assert resolve_agent(None, "anthropic") == "builtin"  # a tether provider, not an agent
    assert resolve_agent("pi", "claude") == "pi"
    with pytest.raises(UnknownAgent, match="unknown agent 'nope'"):
        resolve_agent("nope")


def test_child_args_keep_flag_values_and_put_the_command_last() -> None:
    assert agent_child_args("builtin") == []
    assert agent_child_args("claude", ["--permission-mode", "plan"]) == [
        "--agent",
        "claude",
        "--agent-arg=--permission-mode",
        "--agent-arg=plan",
    ]
    assert agent_child_args("acp", [], ["gemini", "--acp"]) == [
        "--agent",
        "acp",
        "--",
        "gemini",
        "--acp",
    ]
    with pytest.raises(ValueError, match="external agent"):
        agent_child_args("builtin", ["-x"])


def test_find_command_looks_on_path_then_in_the_ci_cache(tmp_path: Path) -> None:
    bin_dir = tmp_path / "npm" / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    program = bin_dir / "claude"
    program.write_text("#!/bin/sh\necho 9.9.9\n")
    program.chmod(0o755)
    env = {"PATH": str(tmp_path / "empty"), "TETHER_CI_CACHE": str(tmp_path)}
    assert find_command(AGENTS["claude"], (), env) == [str(program)]
    assert find_command(AGENTS["claude"], (), {"PATH": str(tmp_path / "empty")}) is None
    assert find_command(AGENTS["acp"], (), env) is None  # acp needs its command after --
    assert find_command(AGENTS["acp"], ["claude", "x"], env) == [str(program), "x"]


def test_find_command_takes_the_program_its_variable_names() -> None:
    env = {"PATH": "/nonexistent", "TETHER_BASH_AGENT": "/opt/bash-agent/src/agent.sh"}
    kind = AGENTS["bash-agent"]
    assert find_command(kind, (), env) == ["/opt/bash-agent/src/agent.sh"]
    assert find_command(kind, ["/x/agent.sh", "-v"], env) == ["/x/agent.sh", "-v"]  # -- wins
    assert find_command(kind, (), {"PATH": "/nonexistent"}) is None


def test_docs_agents_md_holds_the_generated_table() -> None:
    assert markdown() in DOCS.read_text(), (
        "docs/agents.md is stale: paste `tether agents --markdown` between its BEGIN/END marks"
    )


def test_tether_agents_json_lists_every_agent(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "tether", "agents", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == list(AGENTS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["builtin"]["installed"] is True
    assert by_name["claude"]["installed"] is False  # an empty PATH
    assert by_name["claude"]["controls"]["cancel"]["support"] == "native"


def test_every_agent_started_once_says_how_it_takes_the_model() -> None:
    from tether.runtime.child.adapters.commands import LAUNCHES

    for name in LAUNCHES:
        assert AGENTS[name].model != AgentKind._field_defaults["model"], name


def test_the_model_is_a_flag_of_the_clis_that_take_one() -> None:
    claude = cli_launch("claude", ["/x/claude"], ["--allowedTools=Bash"], {}, "m1")
    assert claude is not None
    assert claude.argv[-3:] == ["--allowedTools=Bash", "--model", "m1"]
    assert claude.env["DISABLE_NON_ESSENTIAL_MODEL_CALLS"] == "1"
    pi = cli_launch("pi", ["/x/pi", "--mode", "rpc"], ["--provider", "p"], {}, "m2")
    assert pi is not None
    assert pi.argv == ["/x/pi", "--mode", "rpc", "--provider", "p", "--model", "m2"]
    gemini = cli_launch("gemini", ["/x/gemini", "--acp"], [], {}, "m3")
    assert gemini is not None
    assert gemini.argv == ["/x/gemini", "--acp", "--model", "m3"]
    # codex and ACP agents take it in their protocol: no flag
    codex = cli_launch("codex", ["/x/codex", "app-server"], [], {}, "m4")
    acp = cli_launch("acp", ["/x/agent"], ["--session-mode=plan"], {}, "m5")
    assert codex is not None
    assert acp is not None
    assert "m4" not in codex.argv
    assert acp.argv == ["/x/agent"]
    assert cli_launch("resp", ["/x/prog"], [], {}, "m6") is None  # not started once


@pytest.mark.parametrize(
    ("agent", "args"),
    [("claude", ["--model", "b"]), ("pi", ["--model=b"]), ("gemini", ["-m", "b"])],
)
def test_a_model_given_twice_is_refused(agent: str, args: list[str]) -> None:
    with pytest.raises(ModelTwice, match="given twice"):
        cli_launch(agent, ["/x/cli"], args, {}, "a")
    assert cli_launch(agent, ["/x/cli"], args, {}, None) is not None  # one is fine


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_the_default_finalize_lead_covers_each_agents_stop_time(agent: str) -> None:
    """``tether run``'s automatic finalize comes at least the agent's own stop time (its
    adapter's wait for it to stop, a restart) plus a last turn before the deadline."""
    from tether.cli.run import LAST_TURN_S, finalize_after

    need = AGENTS[agent].stop_s + LAST_TURN_S
    for deadline in (3.0, 8.0, 30.0, 600.0):
        at = finalize_after(deadline, None, agent)
        assert at is not None
        assert deadline - at >= min(deadline, need)
        assert deadline - at >= min(10.0, deadline / 5)
    assert finalize_after(30.0, 4.0, agent) == 26.0  # --finalize-before wins
    assert finalize_after(30.0, 0, agent) is None


def test_bash_agents_stop_time_is_the_adapters_own_wait() -> None:
    from tether.runtime.child.adapters.bash_agent import INTERRUPT_WAIT_S

    assert AGENTS["bash-agent"].stop_s > INTERRUPT_WAIT_S
