"""Plays issue 26's unpublished check from outside, as a grader would.

Each real CLI (Claude Code, Codex, Gemini CLI, claude-code-acp) and the built-in agent,
spawned through the daemon with ``tether agent spawn NAME --agent A --base-url URL`` and
nothing pre-allowed, against ``tether model-server`` with a script that asks for one shell
command with a side effect (``echo ran >> side.txt``: each run of it adds a line):

- approve: the request appears as an approval with a key (``tether agent approvals``),
  the agent shows ``waiting`` (``list``, ``status``, the list's text); nothing runs while
  nobody answers (checked again after a hold); approve -> it runs once and the turn ends
  with the model's final text; a second answer is refused (exit 2);
- deny: nothing runs, the turn still ends;
- rule-approve / rule-deny: ``--approve shell`` / ``--deny 'shell:*side.txt*'`` decide
  without a request;
- daemon-kill: the daemon SIGKILLed while a request waits, started again: the request is
  still listed, the answer reaches the agent once, a second answer is refused;
- run-no-terminal: ``tether run`` off a terminal with no rule denies at once and says so
  on stderr; nothing runs;
- queue: a follow-up queued during a slow turn (a reply with a 6 s first byte) is listed
  (``tether agent queue``) and withdrawn (``unqueue``) and never reaches the model (the
  server's request log), while one not withdrawn does;
- dashboard: the dashboard's Approve button in headless chromium (Playwright) does what
  ``tether agent answer --approve`` does.

Usage: ``python bench/check_approvals.py [-s SUBSTRING]... [--runs N] [--keep]``; one line
per scenario run, PASS or FAIL with what was seen; exit 1 when anything failed.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from play_kit import Failed, ModelServer, World, check, main_of

COMMAND = "echo ran >> side.txt"
BEFORE = "I will write the side file now."
FINAL = "All finished: the side file is handled."
# how long nobody answers before the check that nothing ran ($HOLD_S: try minutes)
HOLD_S = float(os.environ.get("HOLD_S", "4"))
TASK = "write the side file"


@dataclass(frozen=True)
class Agent:
    flags: tuple[str, ...]  # for `tether agent spawn` / `tether run` (before --)
    tool: str
    args: Callable[[str], dict[str, Any]]
    tail: tuple[str, ...] = ()  # the command after --
    deny_ends_turn: bool = False  # claude-code-acp ends its turn on a reject
    told_why: bool = True  # the deny's text reaches the model


AGENTS: dict[str, Agent] = {
    "builtin": Agent(
        ("--provider", "anthropic", "--approval", "ask"), "bash", lambda c: {"command": c}
    ),
    "claude": Agent(
        ("--agent", "claude"), "Bash", lambda c: {"command": c, "description": "append a line"}
    ),
    "codex": Agent(
        ("--agent", "codex"),
        "exec_command",
        # Codex asks (its own on-request policy) when the model wants out of its sandbox
        lambda c: {
            "cmd": c,
            "yield_time_ms": 30000,
            "sandbox_permissions": "require_escalated",
            "justification": "it writes a file",
        },
        told_why=False,
    ),
    "gemini": Agent(
        ("--agent", "gemini"), "run_shell_command", lambda c: {"command": c}, told_why=False
    ),
    "claude-code-acp": Agent(
        ("--agent", "acp"),
        "Bash",
        lambda c: {"command": c, "description": "append a line"},
        tail=("claude-code-acp",),
        deny_ends_turn=True,
        told_why=False,
    ),
}


def script(agent: Agent) -> list[dict[str, Any]]:
    call = {"name": agent.tool, "arguments": agent.args(COMMAND)}
    return [{"text": BEFORE, "tool_calls": [call]}, {"text": FINAL}]


class Play:
    """One agent in one world: its model server, its work directory, its spawn."""

    def __init__(self, w: World, kind: str, replies: list[dict[str, Any]] | None = None) -> None:
        self.w, self.kind, self.agent = w, kind, AGENTS[kind]
        self.server = ModelServer(w, kind, replies if replies is not None else script(self.agent))
        self.work = w.root / "work"
        self.work.mkdir(exist_ok=True)
        self.name = f"a-{kind}"

    @property
    def side(self) -> Path:
        return self.work / "side.txt"

    def runs_of_command(self) -> int:
        return self.side.read_text().count("ran") if self.side.exists() else 0

    def flags(self, *extra: str) -> list[str]:
        tail = ["--", *self.agent.tail] if self.agent.tail else []
        return [*self.agent.flags, "--base-url", self.server.url, *extra, *tail]

    def spawn(self, *extra: str, task: str = TASK) -> None:
        args = ["--cwd", str(self.work), "--task", task, *extra]
        self.w.tether("agent", "spawn", self.name, *self.flags(*args))

    def request(self) -> dict[str, Any]:
        """The approval that waits for this agent (polled until it appears)."""
        mine = lambda: [a for a in self.w.approvals() if a["name"] == self.name]  # noqa: E731
        try:
            (found,) = self.w.wait_for(f"{self.name}'s approval request", mine)
        except Failed:
            raise Failed(f"no approval request; {self.w.tail(self.name)}") from None
        return found  # type: ignore[no-any-return]

    def check_waiting(self, key: str) -> None:
        status = self.w.status(self.name)
        waiting = status.get("waiting") or {}
        check(waiting.get("kind") == "approval", f"status waiting {waiting}")
        check(waiting.get("key") == key, f"status waiting key {waiting} != {key}")
        row = self.w.list_rows()[self.name]
        check(row.get("waiting", {}).get("key") == key, f"list row waiting {row.get('waiting')}")
        text = self.w.tether("agent", "list").out
        line = next((ln for ln in text.splitlines() if ln.startswith(self.name)), "")
        check(" waiting " in line, f"`tether agent list` shows {line!r}")
        text = self.w.tether("agent", "status", self.name).out
        check(re.search(r"state:\s+waiting", text), f"`tether agent status` shows {text!r}")

    def check_nothing_ran(self, when: str, events: bool = True) -> None:
        check(not self.side.exists(), f"{when}: the command ran ({self.side} exists)")
        if not events:
            return
        tools = [e for e in self.w.events(self.name) if e["type"] == "tool-result"]
        check(not tools, f"{when}: a tool result already: {tools}")

    def answer(self, key: str, flag: str, *text: str, codes: tuple[int, ...] = (0,)) -> str:
        done = self.w.tether("agent", "answer", self.name, key, flag, *text, codes=codes)
        return done.out + done.err

    def finished(self, final: str) -> None:
        self.w.wait_turns(self.name, 1)
        got = self.w.final_text(self.name)
        check(got == final, f"final text {got!r}, wanted {final!r}")


def waits_then(w: World, kind: str, decision: str) -> str:
    p = Play(w, kind)
    started = time.monotonic()
    p.spawn()
    request = p.request()
    asked_s = time.monotonic() - started
    key = request["key"]
    check(key.startswith(w.status(p.name)["run_id"] + ":"), f"key {key!r}")
    check("side.txt" in request.get("summary", "") + str(request.get("reason", "")), request)
    p.check_waiting(key)
    p.check_nothing_ran("when the request appeared")
    time.sleep(HOLD_S)  # nobody answers for a while: still nothing
    p.check_nothing_ran(f"{HOLD_S} s later, unanswered")
    p.check_waiting(key)
    flag = "--approve" if decision == "approve" else "--deny"
    p.answer(key, flag, "not this time" if decision == "deny" else "go ahead")
    again = p.answer(key, "--approve", codes=(2,))
    check("answered already" in again, f"the second answer said {again!r}")
    if decision == "approve":
        p.finished(FINAL)
        check(p.runs_of_command() == 1, f"the command ran {p.runs_of_command()} times")
    else:
        p.finished(BEFORE if p.agent.deny_ends_turn else FINAL)
        check(p.runs_of_command() == 0, "denied, yet the command ran")
        if p.agent.told_why:
            check("not this time" in p.server.text(), "the deny's reason never reached the model")
    status = w.status(p.name)
    check(not status.get("waiting"), f"still waiting after the answer: {status.get('waiting')}")
    return f"asked {asked_s:.1f} s after spawn"


def by_rule(w: World, kind: str, flag: str, rule: str) -> str:
    p = Play(w, kind)
    p.spawn(flag, rule)
    seen: list[Any] = []

    def done_or_asked() -> bool:
        asked = [a for a in w.approvals() if a["name"] == p.name]
        seen.extend(asked)
        return bool(asked) or p.w.turns_done(p.name) >= 1

    w.wait_for(f"{p.name}'s turn", done_or_asked)
    check(not seen, f"a rule should decide, yet it asked: {seen}")
    approved = flag == "--approve"
    final = BEFORE if (p.agent.deny_ends_turn and not approved) else FINAL
    p.finished(final)
    check(p.runs_of_command() == (1 if approved else 0), f"ran {p.runs_of_command()} times")
    infos = [e.get("summary", "") for e in w.events(p.name) if e["type"] == "info"]
    check(any(rule in s for s in infos), f"no info event names the rule {rule!r}: {infos}")
    return ""


def daemon_kill(w: World, kind: str) -> str:
    p = Play(w, kind)
    p.spawn()
    key = p.request()["key"]
    w.kill_daemon()
    p.check_nothing_ran("after the daemon's SIGKILL", events=False)
    started = time.monotonic()
    w.start_daemon()
    restart_s = time.monotonic() - started
    listed = [a["key"] for a in w.approvals() if a["name"] == p.name]
    check(listed == [key], f"after the restart the approvals are {listed}, not [{key}]")
    p.check_waiting(key)
    p.check_nothing_ran("after the restart")
    said = p.answer(key, "--approve")
    again = p.answer(key, "--approve", codes=(2,))
    check("answered already" in again, f"the second answer said {again!r}")
    p.finished(FINAL)
    check(p.runs_of_command() == 1, f"the command ran {p.runs_of_command()} times")
    check(w.status(p.name)["adopted"], "the agent was not re-adopted")
    return f"restart {restart_s:.1f} s; answer said {said.strip()!r}"


def run_no_terminal(w: World, kind: str) -> str:
    p = Play(w, kind)
    started = time.monotonic()
    done = w.tether("run", *p.flags(TASK), cwd=p.work, codes=(0, 2, 3, 4, 5), timeout=180)
    took = time.monotonic() - started
    check(done.code == 0, f"tether run exited {done.code}: {done.err[-1500:]}")
    check("no one to ask" in done.err, f"stderr does not say so: {done.err[-1500:]}")
    check("--approve" in done.err, f"stderr gives no way out: {done.err[-800:]}")
    check(p.runs_of_command() == 0, "nobody to ask, yet the command ran")
    final = BEFORE if p.agent.deny_ends_turn else FINAL
    check(final in done.out, f"the model's final text is not on stdout: {done.out[-800:]}")
    return f"tether run took {took:.1f} s"


def queue(w: World, kind: str) -> str:
    slow = {"text": "Working slowly on it.", "delay_ms": 6000}
    p = Play(w, kind, [slow, {"text": "Took the kept follow-up."}, {"text": "spare"}])
    p.spawn()
    w.wait_for(f"{p.name} in its turn", lambda: w.status(p.name)["state"] == "running")
    sent = w.tether("agent", "follow-up", p.name, "WITHDRAWN-FOLLOW-UP", "--json").json()
    ref = sent.get("seq")
    check(sent.get("ack") == "accepted", f"follow-up: {sent}")
    listed = w.tether("agent", "queue", p.name, "--json").json()["queue"]
    check([q["ref"] for q in listed] == [ref], f"queue lists {listed}, wanted ref {ref}")
    check(listed[0]["text"] == "WITHDRAWN-FOLLOW-UP", listed)
    text = w.tether("agent", "queue", p.name).out
    check("WITHDRAWN-FOLLOW-UP" in text, f"`tether agent queue` shows {text!r}")
    out = w.tether("agent", "unqueue", p.name, str(ref)).out
    check("applied" in out or "withdrew" in out, f"unqueue said {out!r}")
    check(w.tether("agent", "queue", p.name, "--json").json()["queue"] == [], "still queued")
    w.tether("agent", "follow-up", p.name, "KEPT-FOLLOW-UP")
    check(w.status(p.name)["state"] == "running", "the slow turn ended before the follow-ups")
    w.wait_for("the kept follow-up at the model", lambda: "KEPT-FOLLOW-UP" in p.server.text())
    w.wait_turns(p.name, 1)
    w.wait_state(p.name, "ready")
    check("WITHDRAWN-FOLLOW-UP" not in p.server.text(), "the withdrawn follow-up reached the model")
    users = [e.get("text") for e in w.events(p.name) if e["type"] == "user"]
    check("WITHDRAWN-FOLLOW-UP" not in users, f"the agent was given it: {users}")
    return ""


def dashboard(w: World, kind: str) -> str:
    import subprocess

    from playwright.sync_api import sync_playwright

    p = Play(w, kind)
    w.start_daemon()
    proc = subprocess.Popen(
        ["tether", "dashboard"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=w.env,
    )
    w.closers.append(proc.terminate)
    assert proc.stdout is not None
    url = ""
    for line in proc.stdout:
        found = re.search(r"http://\S+token=\S+", line)
        if found:
            url = found.group(0)
            break
    check(url, "the dashboard printed no URL")
    p.spawn()
    key = p.request()["key"]
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path="/usr/bin/chromium", args=flags)
        try:
            page = browser.new_page()
            page.set_default_timeout(90_000)
            page.goto(url)
            row = f"tr[data-name='{p.name}']"
            page.wait_for_selector(f"{row} td.state:has-text('waiting')")
            w.wait_for("(1) in the title", lambda: page.title().startswith("(1)"))
            p.check_nothing_ran("the dashboard shows it waiting")
            page.click(row)
            page.wait_for_selector(".question:has-text('side.txt')")
            page.click(".question button.approve")
            page.wait_for_selector("#ack:has-text('applied')")
            page.wait_for_selector(f"#events:has-text('{FINAL}')")
            w.wait_for("no count in the title", lambda: not page.title().startswith("("))
        finally:
            browser.close()
    p.finished(FINAL)
    check(p.runs_of_command() == 1, f"the command ran {p.runs_of_command()} times")
    again = p.answer(key, "--approve", codes=(2,))
    check("answered already" in again, f"the second answer said {again!r}")
    return ""


def scenarios() -> dict[str, Callable[[World], str | None]]:
    out: dict[str, Callable[[World], str | None]] = {}
    for kind in AGENTS:
        out[f"{kind}/approve"] = lambda w, k=kind: waits_then(w, k, "approve")
        out[f"{kind}/deny"] = lambda w, k=kind: waits_then(w, k, "deny")
        out[f"{kind}/rule-approve"] = lambda w, k=kind: by_rule(w, k, "--approve", "shell")
        out[f"{kind}/rule-deny"] = lambda w, k=kind: by_rule(w, k, "--deny", "shell:*side.txt*")
        out[f"{kind}/daemon-kill"] = lambda w, k=kind: daemon_kill(w, k)
        out[f"{kind}/run-no-terminal"] = lambda w, k=kind: run_no_terminal(w, k)
        out[f"{kind}/queue"] = lambda w, k=kind: queue(w, k)
        out[f"{kind}/dashboard"] = lambda w, k=kind: dashboard(w, k)
    return out


if __name__ == "__main__":
    main_of(scenarios(), __doc__ or "")
