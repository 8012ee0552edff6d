"""A hostile agent cannot make the daemon read, remove or block on files it names.

The agents are the hostile TEST DOUBLE (tests/doubles/hostile_child.py), real processes
under a real daemon; while one plays its trick every other client must still be answered.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.doubles import hostile
from tests.support.agentd import AgentDaemon, agentd

__all__ = ["agentd"]
SECRET = "her secret, never to be read by the daemon"
pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("mode", ["final-path-victim", "final-path-fifo", "control-fifo"])
def test_the_daemon_trusts_no_file_an_agent_names_or_plants(agentd: AgentDaemon, mode: str) -> None:
    victim = agentd.root / "victim.txt"
    victim.write_text(SECRET)
    params = {"name": "h", "argv": hostile(mode, arg=victim), "cwd": str(agentd.root)}
    agentd.call("agent.spawn", {**params, "task": "go"}, timeout=10)
    agentd.wait_for("h", lambda s: s["state"] == "ready")
    agentd.call("agent.stop", {"name": "h"}, timeout=10)
    ended = agentd.wait_for("h", lambda s: s["state"] in ("done", "failed"))
    assert agentd.call("agent.list", timeout=5)["agents"]  # still answering everyone
    assert victim.read_text() == SECRET
    events = agentd.events("h")
    assert all(SECRET not in str(event) for event in events)
    final = Path(ended["run_dir"], "final.txt")
    assert not final.exists() or SECRET not in final.read_text()


@pytest.mark.parametrize("mode", ["final-path-mkstemp", "final-path-tmp-hardlink"])
def test_an_agents_own_mkstemp_answer_is_read_whole_and_nothing_else(
    agentd: AgentDaemon, mode: str
) -> None:
    """A spec-conforming agent writes its long answer with mkstemp in its TMPDIR (the
    run's private tmp/): the daemon reads it whole and removes it; a hard link to her file
    planted there is neither read nor removed."""
    victim = agentd.root / "victim.txt"
    victim.write_text(SECRET)
    params = {"name": "m", "argv": hostile(mode, arg=victim), "cwd": str(agentd.root)}
    agentd.call("agent.spawn", {**params, "task": "go"}, timeout=10)
    agentd.wait_for("m", lambda s: s["state"] == "ready")
    agentd.call("agent.stop", {"name": "m"}, timeout=10)
    ended = agentd.wait_for("m", lambda s: s["state"] in ("done", "failed"))
    assert victim.read_text() == SECRET
    tmp = Path(ended["run_dir"], "tmp")
    if mode == "final-path-mkstemp":
        assert ended["final_text"] == "the whole answer, " * 8000
        assert list(tmp.iterdir()) == []
    else:
        assert SECRET not in ended["final_text"]
        assert "the full text could not be read" in ended["final_text"]
        assert (tmp / "evil").exists()
