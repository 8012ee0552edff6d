"""An agent that writes terminal escape sequences (a title change, a screen clear, an 8-bit
CSI) into its text must not drive the terminal of the user who runs ``tether agent``
(before: ``tether agent events`` printed them raw)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.agentd import AgentDaemon, agentd

__all__ = ["agentd"]

EVIL = "hi \x1b]0;pwned\x07\x1b[2J\x9b31m end"
CONTROLS = {chr(c) for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def tether(agentd: AgentDaemon, *argv: str, stdout: int | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        env=agentd.env,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout or ""


def test_attack_agent_text_never_reaches_the_terminal_as_controls(agentd: AgentDaemon) -> None:
    agentd.spawn("e", [{"text": EVIL}, {"text": EVIL}, {"text": EVIL}], task="go")
    agentd.wait_for("e", lambda s: s["state"] == "ready")
    events = tether(agentd, "agent", "events", "e")
    assert "hi  end" in events  # the text is shown, its sequences are not
    assert not CONTROLS & set(events.replace("\n", "")), repr(events)
    # ask's answer into a pipe is the answer itself; on a terminal it is cleaned
    assert tether(agentd, "agent", "ask", "e", "again") == EVIL + "\n"
    controller, terminal = os.openpty()
    try:
        tether(agentd, "agent", "ask", "e", "once more", stdout=terminal)
        os.close(terminal)
        shown = b""
        while chunk := _read(controller):
            shown += chunk
    finally:
        os.close(controller)
    assert b"hi  end" in shown
    assert not CONTROLS & set(shown.decode().replace("\r\n", "")), shown


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other end is closed and drained
        return b""
