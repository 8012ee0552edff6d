"""Claude Code with ``tether mcp-channel``: the REAL Claude Code (the pinned npm CLI).

Two sessions:

- ``agent.spawn {agent: "claude", channel: true}`` (a ``-p`` stream-json session, which
  never shows channel notifications to the model: see docs/channels.md): a push to the
  agent's channel is sent to the agent as a steer carrying the ``<channel>`` tag and
  answers ``delivered: true`` on the child's ack; the model's next request carries it.
  The channel server is loaded all the same: the model (after ``WaitForMcpServers``)
  answers with its ``reply`` tool, which lands in the pushing agent's inbox.
- ``agent.spawn {pty: true, channel: true, argv: [claude, ...]}``: an interactive Claude
  Code as a PTY agent, loading the channel server as a development channel (the test
  presses Enter on its warning through ``agent.drive``): a daemon push reaches the
  model, i.e. its next model request (logged by the scripted model server) carries the
  pushed text in a ``<channel>`` tag; one push made while Claude Code starts, one live.
  The model answers the first with the ``reply`` tool, which lands in the pushing
  agent's inbox as a follow-up.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waits import wait_until
from tether.daemon.channels import claude as claude_channel
from tether.daemon.pty.drive_client import DriveConnection
from tether.daemon.rpc.client import DaemonCallError, DaemonClientError
from tether.modelserver import open_model_server
from tether.transports.ws import WsBinary, WsClosed

from .cli_helpers import MARK, assert_no_survivors, cli_env, daemon_client, kill_marked
from .test_claude import Claude, claude_cli, make_claude

__all__ = ["claude_cli", "make_claude"]

if os.environ.get("CI") != "true":  # under CI the SDK must be there (it is in `dev`)
    pytest.importorskip("mcp", reason="the mcp extra is not installed")


def envelope(content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {"content": content, "meta": {"from_name": "test"}},
    }


def test_mcp_config_names_the_channel_server(tmp_path: Path) -> None:
    config = claude_channel.mcp_config("tether-agent-a", "a", "/run/d.sock")
    server = config["mcpServers"]["tether"]
    assert server["command"] == sys.executable
    assert server["args"][:3] == ["-m", "tether", "mcp-channel"]
    path = claude_channel.write_config(tmp_path / "mcp", "a", config)
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "mcp").stat().st_mode & 0o777 == 0o700
    assert claude_channel.claude_args(path) == [
        "--mcp-config",
        str(path),
        "--dangerously-load-development-channels",
        "server:tether",
    ]


def test_channel_text_is_the_tag_claude_code_shows() -> None:
    pushed = claude_channel_envelope("build failed\non main")
    assert claude_channel.channel_text(pushed) == (
        '<channel source="tether" agent="ci">\nbuild failed\non main\n</channel>'
    )
    odd = {**pushed, "params": {"content": "x", "meta": {"who": 'a"<b>', "source": "me"}}}
    assert claude_channel.channel_text(odd) == (
        '<channel source="tether" who="a&quot;&lt;b&gt;">\nx\n</channel>'
    )


def test_a_claude_agent_with_a_channel_shows_a_daemon_push_to_the_model(
    make_claude: Callable[[list[Any]], Claude], tmp_path: Path
) -> None:
    reply = {"text": "REPLY-FROM-CLAUDE", "to": "ci"}  # -p: the server saw no message
    world = make_claude(
        [
            {"text": "Ready."},
            # -p starts MCP servers in the background: the model waits for them first
            {"text": "Waiting.", "tool_calls": [{"name": "WaitForMcpServers", "arguments": {}}]},
            {"text": "Answering.", "tool_calls": [{"name": REPLY_TOOL, "arguments": reply}]},
            {"text": "Replied."},
            *[{"text": "More."}] * 3,
        ]
    )
    with daemon_client(world.env) as client:
        bad = {"name": "x", "channel": True, "cwd": str(world.work)}
        with pytest.raises(DaemonCallError, match="channel: true goes with agent: claude"):
            client.call("agent.spawn", bad)
        spawn_ci(client, tmp_path)  # the agent the push comes from, to get the reply
        params = {"name": "cc", "task": "hi", "agent": "claude", "channel": True}
        params |= {"agent_args": ["--allowedTools", f"{REPLY_TOOL},WaitForMcpServers"]}
        status = client.call("agent.spawn", params | {"cwd": str(world.work), "wait": True})
        assert status["answer"]["text"] == "Ready."
        channel_id = status["channel_id"]
        assert channel_id.startswith("ch_")
        try:
            # -p Claude Code shows no channel notification: the daemon steers the agent
            # with the tag an interactive session shows, and says delivered on its ack
            route = {"mcp_channel_id": channel_id, "envelope": claude_channel_envelope("MARK-P")}
            assert client.call("channel.push_to_channel", route) == {
                "routed": True,
                "delivered": True,
            }
            pushed = world.server.wait_request(lambda r: "MARK-P" in json.dumps(r["body"]), 60)
            assert pushed is not None, "the model never saw the push"
            assert '<channel source=\\"tether\\" agent=\\"ci\\">\\nMARK-P\\n</channel>' in (
                json.dumps(pushed["body"])
            )
            # the channel server is loaded for its reply tool, and the reply reaches "ci"
            sent = world.server.wait_request(
                lambda r: "sent to agent ci" in json.dumps(r["body"]), 60
            )
            assert sent is not None, "the reply tool did not reach ci"
            assert REPLY_TOOL in [tool["name"] for tool in sent["body"]["tools"]]
            assert_ci_took_the_reply(client)
        finally:
            client.call("agent.stop", {"name": "cc", "mode": "close", "timeout_s": 30})
            client.call("agent.stop", {"name": "ci", "mode": "close", "timeout_s": 15})
        # the agent has ended: a push is not delivered, and says why
        ended = client.call("channel.push_to_channel", route)
        assert ended["delivered"] is False
        assert "cc" in ended["reason"]
    assert_no_survivors(world.mark)


# -- an interactive Claude Code on a pseudo-terminal ------------------------------------------

DEV_CHANNELS_PROMPT = "I am using this for local development"
API_KEY = "sk-ant-tether-test-0123456789abcdefghij"
# the model answers the first channel message with the channel server's reply tool
REPLY_TOOL = "mcp__tether__reply"
REPLY_CALL = {
    "text": "Answering the channel.",
    "tool_calls": [{"name": REPLY_TOOL, "arguments": {"text": "REPLY-FROM-CLAUDE"}}],
}
# Claude Code turns these off its feature flags (GrowthBook), and with them channels
FLAG_KILLERS = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DO_NOT_TRACK",
    "DISABLE_GROWTHBOOK",
)


def claude_home(home: Path, work: Path) -> None:
    """``~/.claude.json`` for an offline first run: no onboarding, folder trust or API-key
    questions, and the channels feature flag (``tengu_harbor``) as if fetched."""
    config = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "numStartups": 1,
        "autoUpdates": False,
        "cachedGrowthBookFeatures": {"tengu_harbor": True},
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {
            str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        },
    }
    (home / ".claude.json").write_text(json.dumps(config))


class Screen:
    """A PTY agent's screen through ``agent.drive``: a thread reads it and answers Claude
    Code's development-channels warning with Enter, once."""

    def __init__(self, name: str, socket: Path) -> None:
        self.drive = DriveConnection.open(name, socket)
        self.text = ""
        self.confirmed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        seen = b""
        while True:
            try:
                events = self.drive.receive()
            except (OSError, DaemonClientError):  # closed: the agent ended, or close()
                return
            for event in events:
                if isinstance(event, WsClosed):
                    return
                if not isinstance(event, WsBinary):
                    continue
                seen = (seen + event.data)[-65536:]
                self.text = ANSI.sub(" ", seen.decode(errors="replace"))
                if not self.confirmed and DEV_CHANNELS_PROMPT in self.text:
                    self.confirmed = True
                    self.drive.send_input(b"\r")

    def close(self) -> None:
        self.drive.close()
        self._reader.join(timeout=10)


ANSI = re.compile(r"\x1b\[[0-9;?>=]*[A-Za-z]|\x1b\][^\x07]*\x07")


def diagnosis(debug: Path, terminal: Screen, requests: Path | None = None) -> str:
    """Claude Code's channel lines from its debug log, the end of its screen and (given
    the model server's log) the tool results the model was last sent."""
    lines = debug.read_text(errors="replace").splitlines() if debug.exists() else []
    channel = [line for line in lines if "tether" in line or "hannel" in line]
    shown = [*channel[-20:], "--- screen:", terminal.text[-1500:]]
    if requests is not None and requests.exists():
        sent = requests.read_text(errors="replace").splitlines()
        results = [line for line in sent if "tool_result" in line]
        shown += ["--- last request with a tool result:", (results or ["none"])[-1][-2000:]]
    return "\n".join(shown)


@pytest.fixture
def claude_world(tmp_path: Path, claude_cli: str) -> Iterator[tuple[str, dict[str, str], Any]]:
    """An environment for an interactive Claude Code (its own HOME, prepared) and a
    scripted model server; nothing started under the environment's mark survives."""
    # The model waits for the channel's tool first, as a model would: Claude Code may send
    # the push before it counts the channel server connected (the request then offers
    # WaitForMcpServers and no reply tool; seen in CI under load). When nothing is
    # pending the wait is refused as an unknown tool and the reply follows all the same.
    wait = {"text": "Waiting.", "tool_calls": [{"name": "WaitForMcpServers", "arguments": {}}]}
    script = [wait, REPLY_CALL, {"text": "Replied."}, *[{"text": "Got the channel message."}] * 4]
    with open_model_server(script, log=tmp_path / "requests.jsonl") as server:
        env = cli_env(
            tmp_path,
            claude_cli,
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY=API_KEY,
            DISABLE_NON_ESSENTIAL_MODEL_CALLS="1",
            DISABLE_AUTOUPDATER="1",  # else it runs `npm install -g` on the machine
            DISABLE_UPDATES="1",
            TERM="xterm-256color",
        )
        for name in FLAG_KILLERS:
            env.pop(name, None)
        (tmp_path / "work").mkdir()
        claude_home(Path(env["HOME"]), tmp_path / "work")
        try:
            yield claude_cli, env, server
        finally:
            kill_marked(env[MARK])


def test_a_pty_claude_agent_with_a_channel_shows_a_daemon_push_to_the_model(
    claude_world: tuple[str, dict[str, str], Any], tmp_path: Path
) -> None:
    program, env, server = claude_world
    debug = tmp_path / "claude-debug.log"
    argv = [program, "--strict-mcp-config", "--allowedTools", f"{REPLY_TOOL},WaitForMcpServers"]
    argv += ["--debug-file", str(debug)]
    with daemon_client(env) as client:
        spawn_ci(client, tmp_path)  # the pushes come from it (meta.agent "ci"): the reply
        spawn = {"name": "cc", "pty": True, "channel": True, "argv": argv, "cols": 120}
        status = client.call("agent.spawn", spawn | {"rows": 40, "cwd": str(tmp_path / "work")})
        assert status["argv"][: len(argv)] == argv
        assert "--dangerously-load-development-channels" in status["argv"]
        channel_id = status["channel_id"]

        def push(text: str) -> dict[str, Any]:
            return {"mcp_channel_id": channel_id, "envelope": claude_channel_envelope(text)}

        # pushed while Claude Code starts: held by the daemon, handed to the channel
        # server when it registers, written once Claude Code listens
        held = client.call("channel.push_to_channel", push("MARKER-1 pushed early"))
        assert held["delivered"] is False
        screen = Screen("cc", client.path)
        try:
            first = server.wait_request(lambda r: "MARKER-1" in json.dumps(r["body"]), 90)
            assert first is not None, diagnosis(debug, screen)
            assert screen.confirmed
            assert first["path"] == "/v1/messages"
            tag = '<channel source=\\"tether\\" agent=\\"ci\\">\\nMARKER-1 pushed early'
            assert tag in json.dumps(first["body"])
            # the model answered with the reply tool: the channel server sent it to "ci"
            result = server.wait_request(lambda r: "sent to agent ci" in json.dumps(r["body"]), 60)
            assert result is not None, diagnosis(debug, screen, tmp_path / "requests.jsonl")
            assert "REPLY-FROM-CLAUDE" in json.dumps(result["body"])
            # the session listens now: a push is delivered at once and shown to the model
            live = client.call("channel.push_to_channel", push("MARKER-2 pushed live"))
            assert live == {"routed": True, "delivered": True}
            second = server.wait_request(lambda r: "MARKER-2" in json.dumps(r["body"]), 60)
            assert second is not None, diagnosis(debug, screen)
            assert second["n"] > result["n"] > first["n"]
            # and "ci" read it as a follow-up, in its next turn
            assert_ci_took_the_reply(client)
        finally:
            stopped = client.call("agent.stop", {"name": "cc", "mode": "close", "timeout_s": 15})
            screen.close()
            client.call("agent.stop", {"name": "ci", "mode": "close", "timeout_s": 15})
        assert stopped["ended"] is True
    assert_no_survivors(env[MARK])


def claude_channel_envelope(content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {"content": content, "meta": {"agent": "ci"}},
    }


def spawn_ci(client: Any, tmp_path: Path) -> None:
    """A scripted agent ``ci``, idle after its first turn: the replies go to it."""
    script = tmp_path / "ci.json"
    script.write_text(json.dumps([{"text": "waiting"}, {"text": "thanks"}]))
    ci = {"name": "ci", "task": "wait", "script": str(script), "wait": True}
    assert client.call("agent.spawn", ci | {"cwd": str(tmp_path)})["state"] == "ready"


def assert_ci_took_the_reply(client: Any) -> None:
    """``ci`` read Claude Code's reply as a follow-up, in its next turn."""
    wait_until(lambda: client.call("agent.status", {"name": "ci"})["turn"] >= 2, "ci's turn 2")
    events = client.call("agent.events", {"name": "ci"})["events"]
    follow = [e["text"] for e in events if e["type"] == "follow-up-injected"]
    assert follow == ["REPLY-FROM-CLAUDE"]
