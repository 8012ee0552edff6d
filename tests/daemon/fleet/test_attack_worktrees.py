"""A daemon SIGKILLed while it makes an agent's worktree, against real git and a real daemon.

The repository's own ``post-checkout`` hook (git runs it inside ``git worktree add``)
holds git there until the test has killed the daemon; git then finishes on its own. The
next daemon shows the agent failed; ``agent rm`` must take the worktree and branch the
cut-short spawn made, so the name can be spawned with a worktree again.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.agentd import AgentDaemon, agentd  # noqa: F401 (fixture)
from tests.support.daemon import frame
from tests.support.waits import wait_gone, wait_until


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@x"}
    env.update(GIT_COMMITTER_NAME="me", GIT_COMMITTER_EMAIL="me@x")
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def _repo_with_a_held_checkout(root: Path) -> tuple[Path, Path, Path]:
    """A repository whose post-checkout hook, while ``held`` exists, writes git's pid to
    ``entered`` and waits until something opens the FIFO ``held`` for writing."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("f\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start")
    held, entered = root / "held", root / "entered"
    os.mkfifo(held)
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(
        f'#!/bin/sh\nif [ -p "{held}" ]; then echo $PPID > "{entered}.tmp"; '
        f'mv "{entered}.tmp" "{entered}"; cat "{held}" > /dev/null; fi\nexit 0\n'
    )
    hook.chmod(0o755)
    return repo, held, entered


def test_attack_a_sigkill_while_the_worktree_is_made_leaves_nothing_rm_cannot_take(
    agentd: AgentDaemon,  # noqa: F811
) -> None:
    repo, held, entered = _repo_with_a_held_checkout(agentd.root)
    script = agentd.script("k", [{"text": "ok"}])
    spawn = {"name": "k", "script": script, "cwd": str(repo), "worktree": True}
    sock = agentd.process.connect()

    sock.sendall(frame({"id": 1, "method": "agent.spawn", "params": spawn}))
    git_pid = int(wait_until(lambda: entered.exists() and entered.read_text(), "git's hook"))
    agentd.kill()  # the daemon dies inside git worktree add
    sock.close()
    with held.open("w"):
        pass  # git goes on, with no daemon
    held.unlink()
    wait_gone([git_pid], "git worktree add")
    assert "tether/k" in git(repo, "branch", "--list", "tether/k")

    agentd.restart()
    assert agentd.status("k")["state"] == "failed"
    agentd.call("agent.rm", {"name": "k"})
    assert "tether/k" not in git(repo, "branch", "--list", "tether/k")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    again = agentd.spawn("k", [{"text": "ok"}], cwd=str(repo), worktree=True)
    assert again["branch"] == "tether/k"
