"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

Agents appear and change state, a steer is acked, a question is answered and the agent
uses the answer, keys typed into a PTY agent's terminal echo back; a screenshot of three
live agents is saved (``$TETHER_ARTIFACTS/dashboard.png``, else in the test's tmp dir). Needs
``/usr/bin/chromium`` (installed by ``.ci/setup``): missing, the test fails under CI and
is skipped elsewhere. Playwright never downloads a browser here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import AgentDaemon, agentd
from tests.support.dashboard import DashboardProcess, artifact_dir, dashboard
from tests.support.gates import ToolGate
from tests.support.pty import BASH, spawn_pty

__all__ = ["agentd", "dashboard"]

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 30_000


@pytest.fixture
def browser_page() -> Iterator[Any]:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing: .ci/setup installs it (apt-get install chromium)")
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="tether-chromium-")
    try:
        with sync_playwright() as driver:
            context = driver.chromium.launch_persistent_context(
                profile,  # a fresh --user-data-dir
                executable_path=str(CHROMIUM),
                args=FLAGS,
                viewport={"width": 1400, "height": 1000},
            )
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.set_default_timeout(WAIT_MS)
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_fleet_in_a_browser(
    agentd: AgentDaemon, dashboard: DashboardProcess, browser_page: Any, tmp_path: Path
) -> None:
    page = browser_page
    page.goto(dashboard.url)
    page.wait_for_selector("#daemon:has-text('0 agents')")

    # agents appear, and change state while the page watches
    ask = {"name": "ask", "arguments": {"question": "Which colour?", "timeout_s": 120}}
    agentd.spawn("planner", [{"tool_calls": [ask]}, {"text": "Painting it blue."}], task="paint")
    slow = {"text": "Working on it.", "delay_ms": 1500}
    agentd.spawn("worker", [slow, {"text": "Steered."}, {"text": "More."}], task="work")
    spawn_pty(agentd, "shell", BASH)
    page.wait_for_selector("tr[data-name='worker'] td.state:has-text('running')")
    page.wait_for_selector("tr[data-name='worker'] td.state:has-text('ready')")
    page.wait_for_selector("tr[data-name='shell'] td.kind:has-text('pty')")

    # a steer, and its ack
    page.click("tr[data-name='worker']")
    page.wait_for_selector("#events:has-text('Working on it.')")
    page.fill("#steer-text", "and also the docs")
    page.click("#steer")
    page.wait_for_selector("#ack:has-text('steer accepted')")
    page.wait_for_selector("#events:has-text('and also the docs')")

    # a question, answered; the agent goes on with the answer
    page.wait_for_selector("tr[data-name='planner'] td.questions .badge:has-text('1')")
    page.click("tr[data-name='planner']")
    page.wait_for_selector(".question:has-text('Which colour?')")
    page.fill(".question input.answer-text", "blue")
    page.click(".question button.answer")
    page.wait_for_selector("#ack:has-text('answered as answer applied')")
    page.wait_for_selector("#events:has-text('answer: blue')")
    page.wait_for_selector("#events:has-text('Painting it blue.')")
    page.wait_for_selector("#inbox li.answered:has-text('blue')")

    # a terminal: keys typed in the page reach bash, and its echo comes back
    page.click("tr[data-name='shell']")
    page.wait_for_selector("#terminal .xterm-screen")
    page.click("#terminal")
    page.keyboard.type("echo typed-$((6*7))\n")
    page.wait_for_selector("#terminal .xterm-rows:has-text('typed-42')")
    page.wait_for_selector("tr[data-name='planner'] td.state:has-text('ready')")
    page.screenshot(path=str(artifact_dir(tmp_path) / "dashboard.png"))


def test_an_approval_approved_in_a_browser(
    agentd: AgentDaemon, dashboard: DashboardProcess, browser_page: Any
) -> None:
    page = browser_page
    page.goto(dashboard.url)
    work = agentd.root / "gated"
    work.mkdir()
    bash = {"name": "bash", "arguments": {"command": "touch made.txt"}}
    replies = [{"text": "Making it.", "tool_calls": [bash]}, {"text": "All done."}]
    agentd.spawn("idle", [{"text": "Nothing to do."}], task="rest")
    agentd.spawn("gated", replies, task="make it", cwd=str(work), approval="ask")
    # the agent that waits is marked, listed first, and counted in the title
    page.wait_for_selector("tr[data-name='gated'] td.state:has-text('waiting')")
    page.wait_for_selector("#agents tbody tr:first-child[data-name='gated'].waiting")
    page.wait_for_function("document.title.startsWith('(1)')")
    assert not (work / "made.txt").exists()
    page.click("tr[data-name='gated']")
    page.wait_for_selector(".question:has-text('touch made.txt')")
    page.click(".question button.approve")
    page.wait_for_selector("#ack:has-text('answered as answer applied')")
    page.wait_for_selector("#events:has-text('All done.')")
    page.wait_for_selector("tr[data-name='gated'] td.state:has-text('ready')")
    page.wait_for_function("!document.title.startsWith('(')")
    assert (work / "made.txt").exists()


def test_a_queued_follow_up_withdrawn_in_a_browser(
    agentd: AgentDaemon,
    dashboard: DashboardProcess,
    browser_page: Any,
    tool_gate: Callable[[Path], ToolGate],
) -> None:
    page = browser_page
    page.goto(dashboard.url)
    work = agentd.root / "busy"
    work.mkdir()
    gate = tool_gate(work / "go")
    bash = {"name": "bash", "arguments": {"command": gate.command}}
    agentd.spawn("busy", [{"tool_calls": [bash]}, {"text": "Done."}], task="work", cwd=str(work))
    agentd.wait_for("busy", lambda s: s["state"] == "running")
    sent = agentd.call("agent.follow_up", {"name": "busy", "text": "NEVER TO BE SEEN"})
    page.click("tr[data-name='busy']")
    page.wait_for_selector(f"#queue li[data-ref='{sent['seq']}']:has-text('NEVER TO BE SEEN')")
    page.click("#queue button.withdraw")
    page.wait_for_selector(f"#ack:has-text('withdrew {sent['seq']}')")
    assert agentd.call("agent.queue", {"name": "busy"})["queue"] == []
    gate.open()
    page.wait_for_selector("#events:has-text('Done.')")
    assert "NEVER TO BE SEEN" not in page.inner_text("#events")


def test_the_worktree_branch_base_and_diff_of_a_selected_agent(
    agentd: AgentDaemon, dashboard: DashboardProcess, browser_page: Any
) -> None:
    import subprocess

    repo = agentd.root / "repo"
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "0")):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=me", "-c", "user.email=me@x", *args],
            check=True,
        )
    write = {"name": "write", "arguments": {"path": "new.txt", "content": "made by d\n"}}
    agentd.spawn("d", [{"tool_calls": [write]}, {"text": "written"}], task="go", cwd=str(repo),
                 worktree=True)  # fmt: skip
    tree = agentd.wait_for("d", lambda s: s["state"] == "ready" and s["turn"] >= 1)["worktree"]
    page = browser_page
    page.goto(dashboard.url)
    page.click("tr[data-name='d']")
    page.wait_for_selector(f"#diff-branch:has-text('tether/d → main, worktree {tree}')")
    page.wait_for_selector("#diff:has-text('+made by d')")
