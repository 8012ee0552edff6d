"""The per-CLI configuration for a base URL (``--base-url``): what each agent gets, written
privately into its own home, and the agents it refuses. The real CLIs read it: every
real-CLI test (tests/adapters/agent_world.py, test_claude.py) points its CLI at the model
server through this writer (tether.modelserver.clients), and
tests/adapters/test_resume_clis.py spawns with base_url alone."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest

from tether.runtime.child.adapters.config import KEY, check_base_url, plan_config, write_config

URL = "http://127.0.0.1:8123/t/token"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_config_is_written_privately_into_the_agents_home(tmp_path: Path) -> None:
    home = tmp_path / "homes" / "a1"
    for agent in ("codex", "pi", "gemini"):
        write_config(plan_config(agent, URL, str(home)))
    files = [
        home / ".codex/config.toml",
        home / ".pi/agent/models.json",
        home / ".gemini/settings.json",
    ]
    for path in files:
        assert mode(path) == 0o600
        folder = path.parent
        while folder != home.parent:
            assert mode(folder) == 0o700, folder
            folder = folder.parent
    codex = tomllib.loads(files[0].read_text())
    assert codex["model_provider"] == "tether"
    assert codex["model_providers"]["tether"]["base_url"] == f"{URL}/v1"
    assert codex["model_providers"]["tether"]["wire_api"] == "responses"
    pi = json.loads(files[1].read_text())["providers"]["tether"]
    assert pi["baseUrl"] == f"{URL}/v1"
    assert pi["models"] == [{"id": "scripted", "reasoning": False}]
    write_config(plan_config("codex", URL + "/other", str(home)))  # replaced whole
    assert "other" in files[0].read_text()


def test_each_agent_gets_its_environment_and_arguments(tmp_path: Path) -> None:
    home = str(tmp_path / "h")
    claude = plan_config("claude", URL + "/", home)
    assert claude.env == {"ANTHROPIC_BASE_URL": URL, "ANTHROPIC_API_KEY": KEY, "HOME": home}
    codex = plan_config("codex", URL, home, model="gpt-x")
    assert codex.env["CODEX_HOME"] == f"{home}/.codex"
    assert 'model = "gpt-x"' in codex.files[0][1]
    pi = plan_config("pi", URL, home)
    assert pi.args == ("--provider", "tether", "--offline", "--model", "scripted")
    named = plan_config("pi", URL, home, model="m1")
    assert named.args == ("--provider", "tether", "--offline")  # the run's --model follows
    assert '"id": "m1"' in named.files[0][1]
    assert plan_config("gemini", URL, home).args == ("--model", "gemini-2.5-flash")
    assert plan_config("gemini", URL, home, model="g").args == ()
    acp = plan_config("acp", URL, home, command=["/x/claude-code-acp"])
    assert acp.env["ANTHROPIC_BASE_URL"] == URL
    bash = plan_config("bash-agent", URL, home)
    assert bash.env["ANTHROPIC_BASE_URL"] == f"{URL}/v1"
    assert bash.home == ""
    builtin = plan_config("builtin", URL, home, provider="openai")
    assert builtin.env == {"OPENAI_BASE_URL": f"{URL}/v1"}
    assert builtin.home == ""


@pytest.mark.parametrize(
    ("agent", "kwargs", "why"),
    [
        ("resp", {}, "does not know how to point agent resp"),
        ("acp", {"command": ["/x/some-acp-agent"]}, "does not know how to point agent acp"),
        ("builtin", {"provider": "scripted"}, "anthropic or openai provider"),
        ("builtin", {}, "anthropic or openai provider"),
    ],
)
def test_agents_it_cannot_point_are_refused(
    agent: str, kwargs: dict[str, object], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        plan_config(agent, URL, "/h", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url", ["ftp://x", "127.0.0.1:80", "http://a b", "http://x\n", "http://" + "a" * 3000, ""]
)
def test_a_base_url_that_is_no_url_is_refused(url: str) -> None:
    assert check_base_url(url) is not None
    with pytest.raises(ValueError, match="base_url"):
        plan_config("claude", url, "/h")
    assert check_base_url("https://proxy.example/v") is None


def test_the_runs_env_wins_but_not_over_the_home() -> None:
    config = plan_config("codex", URL, "/h/a")
    env = config.child_env({"HOME": "/elsewhere", "TETHER_MODEL_SERVER_KEY": "real", "X": "1"})
    assert env["HOME"] == "/h/a"
    assert env["CODEX_HOME"] == "/h/a/.codex"
    assert env["TETHER_MODEL_SERVER_KEY"] == "real"
    assert env["X"] == "1"
