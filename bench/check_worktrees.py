"""Plays issue 27's unpublished check from outside, as a grader would.

Every agent runs through the daemon (``tether agent spawn``), pointed at ``tether
model-server`` with ``--base-url`` (no hand-written config), and is driven by the CLI:

- side-by-side: in a scratch git repository, the built-in agent (its ``write`` tool) and
  Claude Code (two Bash calls in one turn) spawned with ``--worktree`` each write
  ``file.txt`` differently; each sees only its own change (the files, and the ``cat`` the
  model was sent back); ``diff`` shows exactly it; ``merge`` of the first lands it on the
  base branch; the second's merge is refused as a conflict and nothing changes (every
  ref, ``git status``, the files, both worktrees); ``rm`` refuses unmerged work without
  ``--force`` and then removes the worktree and the branch;
- resume (built-in and Claude Code): after ``done`` (stopped), after a SIGKILL of the
  agent's process, and after every tether process is killed and the runtime directory
  removed (a reboot: the agent is listed ``stopped``/resumable, its worktree intact): the
  follow-up's model request carries the first turn's text;
- fork (built-in and Claude Code): the new agent's first request carries the source's
  conversation; the source goes on unchanged (its next request has nothing of the fork);
- admission: ``tether daemon --max-running 2`` and five spawns: two run, three queue
  (positions 1, 2, 3) and start in spawn order as running agents end; a stopped queued
  agent leaves the queue.

Usage: ``python bench/check_worktrees.py [-s SUBSTRING]... [--runs N] [--keep]``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from play_kit import ModelServer, World, check, main_of

FLAGS = {
    "builtin": ("--provider", "anthropic"),
    "claude": ("--agent", "claude", "--approve", "shell", "--approve", "edit"),
}


def git(repo: Path, *args: str) -> str:
    got = subprocess.run(
        ["git", "-C", str(repo), *args], check=False, capture_output=True, text=True
    )
    check(got.returncode == 0, f"git {' '.join(args)}: {got.stderr}")
    return got.stdout


def scratch_repo(w: World) -> Path:
    repo = w.root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "file.txt").write_text("base line\n")
    (repo / "other.txt").write_text("untouched\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=Grader", "-c", "user.email=g@x", "commit", "-qm", "base")
    return repo


def snapshot(repo: Path) -> dict[str, str]:
    """Every ref, the status, HEAD and the checkout's files: what 'nothing changed' means."""
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "head": git(repo, "rev-parse", "HEAD", "--abbrev-ref", "HEAD"),
        "file": (repo / "file.txt").read_text(),
        "other": (repo / "other.txt").read_text(),
    }


def spawn(w: World, server: ModelServer, name: str, kind: str, task: str, *extra: str) -> None:
    w.tether("agent", "spawn", name, *FLAGS[kind], "--base-url", server.url, "--task", task, *extra)


# -- side by side -----------------------------------------------------------------------------


def claude_script(tools: str) -> list[dict[str, Any]]:
    """B's replies: its shell tool (two calls in one turn), or Read then Write (relative
    paths: the script cannot know where the worktree will be)."""
    bash = lambda c: {"name": "Bash", "arguments": {"command": c, "description": "x"}}  # noqa: E731
    cat = {"text": "Reading.", "tool_calls": [bash("cat file.txt")]}
    if tools == "bash":
        two = [bash("printf 'written by B\\n' > file.txt"), bash("echo made > new-by-b.txt")]
        return [{"text": "Two at once.", "tool_calls": two}, cat, {"text": "B is done."}]
    read = {"name": "Read", "arguments": {"file_path": "file.txt"}}
    write = lambda f, c: {"name": "Write", "arguments": {"file_path": f, "content": c}}  # noqa: E731
    writes = [write("file.txt", "written by B\n"), write("new-by-b.txt", "made\n")]
    return [
        {"text": "Reading first.", "tool_calls": [read]},
        {"text": "Two writes.", "tool_calls": writes},
        cat,
        {"text": "B is done."},
    ]


def side_by_side(w: World, tools: str = "bash") -> str:
    repo = scratch_repo(w)
    base_head = git(repo, "rev-parse", "HEAD").strip()
    write = {"name": "write", "arguments": {"path": "file.txt", "content": "written by A\n"}}
    cat_a = {"name": "bash", "arguments": {"command": "cat file.txt"}}
    server_a = ModelServer(
        w,
        "a",
        [
            {"text": "Writing.", "tool_calls": [write]},
            {"text": "Reading.", "tool_calls": [cat_a]},
            {"text": "A is done."},
        ],
    )
    server_b = ModelServer(w, "b", claude_script(tools))
    spawn(w, server_a, "A", "builtin", "write the file", "--worktree", "--cwd", str(repo))
    spawn(w, server_b, "B", "claude", "write the file", "--worktree", "--cwd", str(repo))
    for name in ("A", "B"):
        w.wait_turns(name, 1)
    a, b = w.status("A"), w.status("B")
    for name, row in (("A", a), ("B", b)):
        check(row.get("branch") == f"tether/{name}", f"{name}'s branch {row.get('branch')}")
        check(row.get("base") == "main", f"{name}'s base {row.get('base')}")
        tree = Path(row.get("worktree") or "/nonexistent")
        check(tree.is_dir() and repo not in tree.parents, f"{name}'s worktree {tree}")
        text = w.tether("agent", "status", name).out
        check(
            "tether/" + name in text and str(tree) in text,
            f"`tether agent status {name}` does not show its worktree and branch:\n{text}",
        )
    tree_a, tree_b = Path(a["worktree"]), Path(b["worktree"])
    check((tree_a / "file.txt").read_text() == "written by A\n", "A's file")
    check((tree_b / "file.txt").read_text() == "written by B\n", "B's file")
    check(not (tree_a / "new-by-b.txt").exists(), "B's new file is in A's worktree")
    check((repo / "file.txt").read_text() == "base line\n", "the repository changed")
    # each agent saw only its own change: what its `cat` returned to the model
    seen_a, seen_b = server_a.model_requests()[-1], server_b.model_requests()[-1]
    check(
        "written by A" in str(seen_a["body"]) and "written by B" not in str(seen_a["body"]),
        "A's model saw the wrong file",
    )
    check(
        "written by B" in str(seen_b["body"]) and "written by A" not in str(seen_b["body"]),
        "B's model saw the wrong file",
    )
    diff_merge_rm(w, repo, tree_a, tree_b, base_head)
    return ""


def diff_merge_rm(w: World, repo: Path, tree_a: Path, tree_b: Path, base_head: str) -> None:
    """A's and B's diffs; A merged, B's merge refused with nothing changed; rm."""
    # diff: exactly its change (untracked included)
    diff_a = w.tether("agent", "diff", "A").out
    check("-base line" in diff_a and "+written by A" in diff_a, f"A's diff:\n{diff_a}")
    check(diff_a.count("diff --git") == 1, f"A's diff has more than file.txt:\n{diff_a}")
    diff_b = w.tether("agent", "diff", "B").out
    check("+written by B" in diff_b and "new-by-b.txt" in diff_b, f"B's diff:\n{diff_b}")
    check(diff_b.count("diff --git") == 2, f"B's diff:\n{diff_b}")
    stat = w.tether("agent", "diff", "B", "--stat").out
    check("file.txt" in stat and "new-by-b.txt" in stat and "other.txt" not in stat, stat)
    # merge A: lands on main
    out = w.tether("agent", "merge", "A").out
    check((repo / "file.txt").read_text() == "written by A\n", f"merge of A: {out}")
    check(git(repo, "status", "--porcelain") == "", "the checkout is dirty after the merge")
    log = git(repo, "log", "--format=%an %s", "main")
    check(git(repo, "merge-base", "--is-ancestor", base_head, "main") == "", log)
    # merge B: refused, nothing anywhere changes
    before = snapshot(repo)
    b_files = ((tree_b / "file.txt").read_text(), (tree_b / "new-by-b.txt").read_text())
    b_status = git(tree_b, "status", "--porcelain", "--untracked-files=all")
    refused = w.tether("agent", "merge", "B", codes=(2,))
    said = refused.out + refused.err
    check("conflict" in said and "file.txt" in said, f"merge of B said: {said}")
    check(snapshot(repo) == before, f"the refused merge changed the repository: {said}")
    after_b = ((tree_b / "file.txt").read_text(), (tree_b / "new-by-b.txt").read_text())
    check(after_b == b_files, "the refused merge changed B's worktree")
    check(git(tree_b, "status", "--porcelain", "--untracked-files=all") == b_status, "B's status")
    # rm: unmerged work refused without --force; then worktree and branch go
    for name in ("A", "B"):
        w.tether("agent", "stop", name)
        w.wait_state(name, "done", "stopped", "cancelled")
    refused = w.tether("agent", "rm", "B", codes=(2,))
    check("--force" in refused.out + refused.err, f"rm B said {refused.out + refused.err}")
    check(tree_b.is_dir() and git(repo, "branch", "--list", "tether/B"), "rm B removed it")
    w.tether("agent", "rm", "A")
    w.tether("agent", "rm", "B", "--force")
    for name, tree in (("A", tree_a), ("B", tree_b)):
        check(not tree.exists(), f"{name}'s worktree {tree} is still there")
        check(not git(repo, "branch", "--list", f"tether/{name}"), f"branch tether/{name} stayed")
    trees = git(repo, "worktree", "list", "--porcelain").count("worktree ")
    check(trees == 1, f"git worktree list: {git(repo, 'worktree', 'list')}")
    check((repo / "file.txt").read_text() == "written by A\n", "rm changed the checkout")


# -- resume -----------------------------------------------------------------------------------


FIRST_TASK = "Remember the word PELICAN-{n} for later."
FIRST_REPLY = "I will remember PELICAN-{n}, noted in turn one."


def first_turn(w: World, kind: str, *extra: str) -> tuple[ModelServer, str]:
    n = int(time.monotonic() * 1000) % 100000
    replies = [{"text": FIRST_REPLY.format(n=n)}, {"text": "It was the pelican."}, {"text": "x"}]
    server = ModelServer(w, kind, replies)
    spawn(w, server, "r", kind, FIRST_TASK.format(n=n), *extra)
    w.wait_turns("r", 1)
    return server, str(n)


def check_resumed(w: World, server: ModelServer, n: str, previous_run: str) -> str:
    said = w.tether("agent", "follow-up", "r", "Which word was it?").out
    check("resumed" in said, f"the follow-up said {said!r}")
    w.wait_for("the follow-up's model request", lambda: len(server.model_requests()) >= 2)
    body = str(server.model_requests()[1]["body"])
    check("Which word was it?" in body, "the follow-up is not in the request")
    check(FIRST_TASK.format(n=n) in body, "the first turn's task is not in the request")
    check(FIRST_REPLY.format(n=n) in body, "the first turn's answer is not in the request")
    w.wait_for("the resumed turn", lambda: w.final_text("r") == "It was the pelican.")
    run = w.status("r")["run_id"]
    check(run != previous_run, "the same run id after a resume")
    return said.strip()


def resume_after_done(w: World, kind: str) -> str:
    server, n = first_turn(w, kind)
    run = w.status("r")["run_id"]
    w.tether("agent", "stop", "r")
    row = w.wait_state("r", "done")
    check(row.get("resumable"), f"not resumable after done: {row}")
    return check_resumed(w, server, n, run)


def resume_after_sigkill(w: World, kind: str) -> str:
    server, n = first_turn(w, kind)
    row = w.status("r")
    os.kill(row["pid"], signal.SIGKILL)
    ended = w.wait_state("r", "failed", "stopped", "done", "cancelled")
    check(ended.get("resumable"), f"not resumable after SIGKILL: {ended}")
    return f"ended {ended['state']}; " + check_resumed(w, server, n, row["run_id"])


def cli_pids(agent_pid: int) -> list[int]:
    """The agent CLI's own processes under the agent's child (Claude Code: its node
    process, run with --input-format)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(stat[1]) == agent_pid and b"--input-format" in cmd:
            found.append(int(entry))
    return found


def resume_after_cli_sigkill(w: World, kind: str) -> str:
    """Claude Code's own process (not tether's child) SIGKILLed after the first turn."""
    server, n = first_turn(w, kind)
    row = w.status("r")
    pids = cli_pids(row["pid"])
    check(pids, f"no Claude Code process under {row['pid']}")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    time.sleep(2)  # let the agent notice, as a person would not be quicker
    state = w.status("r")["state"]
    return f"after the CLI's SIGKILL: {state}; " + check_resumed(w, server, n, row["run_id"])


def resume_after_reboot(w: World, kind: str) -> str:
    repo = scratch_repo(w)
    server, n = first_turn(w, kind, "--worktree", "--cwd", str(repo))
    row = w.status("r")
    tree = Path(row["worktree"])
    (tree / "uncommitted.txt").write_text("work in progress\n")
    w.kill_all()
    runtime = Path(w.env["XDG_RUNTIME_DIR"])
    for entry in runtime.iterdir():
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    check(not list(runtime.iterdir()), "the runtime directory is not empty")
    started = time.monotonic()
    w.start_daemon()
    took = time.monotonic() - started
    listed = w.list_rows()["r"]
    check(listed["state"] == "stopped", f"after the reboot the agent is {listed['state']!r}")
    check(listed.get("resumable"), f"after the reboot: not resumable: {listed}")
    text = w.tether("agent", "list").out
    check("resumable" in text, f"`tether agent list` does not say resumable:\n{text}")
    check((tree / "uncommitted.txt").exists(), "the worktree lost its work")
    said = check_resumed(w, server, n, row["run_id"])
    check(w.status("r").get("worktree") == str(tree), "the resumed agent has another worktree")
    return f"daemon up in {took:.1f} s; {said}"


# -- fork -------------------------------------------------------------------------------------


def fork(w: World, kind: str) -> str:
    repo = scratch_repo(w)
    write = (
        {"name": "write", "arguments": {"path": "file.txt", "content": "source work\n"}}
        if kind == "builtin"
        else {
            "name": "Bash",
            "arguments": {"command": "printf 'source work\\n' > file.txt", "description": "x"},
        }
    )
    replies = [
        {"text": "Writing first.", "tool_calls": [write]},
        {"text": "Noted ALBATROSS for the source."},
        {"text": "Fork answers."},
        {"text": "Source answers again."},
    ]
    server = ModelServer(w, kind, replies)
    spawn(w, server, "src", kind, "Remember ALBATROSS.", "--worktree", "--cwd", str(repo))
    w.wait_turns("src", 1)
    before = w.status("src")
    w.tether("agent", "fork", "src", "twin", "--task", "FORK-ONLY question")
    w.wait_turns("twin", 1)
    first_of_twin = str(server.model_requests()[2]["body"])
    for text in ("Remember ALBATROSS.", "Noted ALBATROSS for the source.", "FORK-ONLY question"):
        check(text in first_of_twin, f"the fork's first request lacks {text!r}")
    check(w.final_text("twin") == "Fork answers.", f"twin said {w.final_text('twin')!r}")
    twin = w.status("twin")
    check(twin.get("branch") == "tether/twin", f"the fork's branch {twin.get('branch')}")
    check(
        (Path(twin["worktree"]) / "file.txt").read_text() == "source work\n",
        "the fork's worktree lacks the source's work",
    )
    after = w.status("src")
    check(
        after["run_id"] == before["run_id"] and after["state"] == before["state"],
        f"the source changed: {before['state']} -> {after['state']}",
    )
    w.tether("agent", "follow-up", "src", "Source goes on.")
    w.wait_for("the source's next request", lambda: len(server.model_requests()) >= 4)
    next_of_src = str(server.model_requests()[3]["body"])
    check("Source goes on." in next_of_src and "ALBATROSS" in next_of_src, "source's request")
    check(
        "FORK-ONLY" not in next_of_src and "Fork answers" not in next_of_src,
        "the source's conversation has the fork's turn in it",
    )
    w.wait_for("the source's turn 2", lambda: w.turns_done("src") >= 2)
    check((Path(before["worktree"]) / "file.txt").read_text() == "source work\n", "source tree")
    return ""


# -- admission --------------------------------------------------------------------------------


def admission(w: World) -> str:
    w.start_daemon("--max-running", "2")
    script = w.root / "one.json"
    script.write_text('[{"text": "Here."}]')
    names = [f"q{i}" for i in range(1, 6)]
    for name in names:
        w.tether(
            "agent",
            "spawn",
            name,
            "--script",
            str(script),
            "--provider",
            "scripted",
            "--task",
            "hello",
        )
    rows = w.list_rows()
    states = {n: rows[n]["state"] for n in names}
    check([states[n] for n in names[2:]] == ["queued"] * 3, f"states {states}")
    check(all(states[n] != "queued" for n in names[:2]), f"states {states}")
    positions = [rows[n].get("queue_position") for n in names[2:]]
    check(positions == [1, 2, 3], f"queue positions {positions}")
    text = w.tether("agent", "list").out
    check(text.count("queued") >= 3, f"`tether agent list`:\n{text}")
    started_order = []
    for ending, starting in (("q1", "q3"), ("q2", "q4"), ("q3", "q5")):
        w.wait_turns(ending, 1)
        w.tether("agent", "stop", ending)
        w.wait_state(starting, "ready", "running", "starting")
        started_order.append(starting)
        rows = w.list_rows()
        running = [n for n in names if rows[n]["state"] in ("ready", "running", "starting")]
        check(len(running) <= 2, f"more than two run: {running}")
        waiting = [n for n in names if rows[n]["state"] == "queued"]
        check(waiting == names[names.index(starting) + 1 :], f"queued now: {waiting}")
    # a queued agent that is stopped leaves the queue
    w.tether(
        "agent", "spawn", "q6", "--script", str(script), "--provider", "scripted", "--task", "hello"
    )
    check(w.status("q6")["state"] == "queued", "q6 is not queued")
    w.tether("agent", "stop", "q6")
    gone = w.status("q6")["state"]
    check(gone != "queued", f"a stopped queued agent is {gone}")
    w.tether("agent", "stop", "q4")
    w.wait_state("q4", "done")
    check(w.status("q6")["state"] == gone, "the stopped queued agent started after all")
    return f"started in order {started_order}; stopped queued agent: {gone}"


def admission_by_themselves(w: World) -> str:
    """Five slow tasks under --max-running 2, spawned --close-when-idle: each run ends
    once its task is answered, and the queue moves on by itself, in spawn order."""
    w.start_daemon("--max-running", "2")
    script = w.root / "slow.json"
    script.write_text('[{"text": "Slowly here.", "delay_ms": 2500}]')
    names = [f"s{i}" for i in range(1, 6)]
    for name in names:
        w.tether("agent", "spawn", name, "--script", str(script), "--provider", "scripted",
                 "--task", "hello", "--close-when-idle")  # fmt: skip
    rows = w.list_rows()
    check([rows[n]["state"] for n in names[2:]] == ["queued"] * 3, f"{rows}")
    for name in names:
        w.wait_state(name, "done")
    rows = w.list_rows()
    order = sorted(names, key=lambda n: rows[n]["started_at"])
    check(order == names, f"started in the order {order}")
    spans = [(rows[n]["started_at"], rows[n]["ended_at"]) for n in names]
    most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    check(most <= 2, f"{most} ran at once: {spans}")
    return f"started in order {order}; at most {most} at once"


def scenarios() -> dict[str, Callable[[World], str | None]]:
    out: dict[str, Callable[[World], str | None]] = {
        "side-by-side": side_by_side,
        "side-by-side-write": lambda w: side_by_side(w, "write"),
    }
    for kind in ("builtin", "claude"):
        out[f"{kind}/resume-after-done"] = lambda w, k=kind: resume_after_done(w, k)
        out[f"{kind}/resume-after-sigkill"] = lambda w, k=kind: resume_after_sigkill(w, k)
        out[f"{kind}/resume-after-reboot"] = lambda w, k=kind: resume_after_reboot(w, k)
        out[f"{kind}/fork"] = lambda w, k=kind: fork(w, k)
    out["claude/resume-after-cli-sigkill"] = lambda w: resume_after_cli_sigkill(w, "claude")
    out["admission"] = admission
    out["admission-by-themselves"] = admission_by_themselves
    return out


if __name__ == "__main__":
    main_of(scenarios(), __doc__ or "")
