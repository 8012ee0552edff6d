"""``tether demo --agent NAME``: the same three runs on a real agent CLI, with no API key.

Each run gets its own scripted model server (:mod:`tether.modelserver`) speaking the
CLI's provider API, and the CLI runs in a private HOME under the demo's scratch
directory, so nothing of the user's own set-up is read or written. The scripts make real
tool calls through the CLI's own tools:

- ``steered``: writes notes with the CLI's shell tool; steered after that first tool
  call, a CLI that steers natively takes the steer in before its next model call, one
  that cannot (ACP: Gemini CLI) gets it as its next prompt when the first ends, and its
  script answers each prompt in turn;
- ``deadline``: a long "build" under a deadline; the parent's ``finalize`` (after
  :data:`FINALIZE_AFTER_S`, which leaves a slow CLI room to start: a cold Gemini CLI
  takes ~15 s on a loaded 2-core machine, and a finalize that came before the first
  model call would get the build's scripted tool call) interrupts it and the last turn
  answers;
- ``cancelled``: counting to ten in a shell loop, cancelled after a couple of numbers.

:data:`CLIS` lists the CLIs with a demo; :data:`tether.modelserver.clients.CLIENTS` says
how to point each at a model server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from tether.modelserver.clients import CLIENTS, Client
from tether.runtime.child.adapters.registry import AGENTS, Support

DEADLINE_S: Final = 50.0
FINALIZE_AFTER_S: Final = 25.0
BUILD_S: Final = 60  # the scripted build's `sleep`: longer than the deadline


# The CLIs with a demo: how each is pointed at a model server and runs a shell command.
CLIS: Final[dict[str, Client]] = {
    name: CLIENTS[name] for name in ("claude", "codex", "pi", "gemini")
}


def scripts(demo: Client) -> dict[str, list[dict[str, Any]]]:
    """The scripted replies of each run, calling the CLI's own shell tool."""

    def call(text: str, command: str) -> dict[str, Any]:
        tool = {"name": demo.shell_tool, "arguments": demo.tool_args(command)}
        return {"text": text, "tool_calls": [tool], "chunk_ms": 15}

    notes = "mkdir -p notes && printf 'one\\ntwo\\n' > notes/a.txt && sleep 1 && ls notes"
    count = "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 1; done"
    answer = {"text": "There is one notes file, notes/a.txt, with 2 lines.", "chunk_ms": 15}
    if AGENTS[demo.agent].controls["steer"].support is Support.NATIVE:
        steered = [
            call("I'll take some notes first.", notes),
            call("You asked me to count lines too.", "wc -l notes/*"),
            answer,
        ]
    else:  # the steer is the next prompt, once the first is answered
        steered = [
            call("I'll take some notes first.", notes),
            {"text": "I wrote one notes file, notes/a.txt.", "chunk_ms": 15},
            call("Counting the lines, as you asked.", "wc -l notes/*"),
            answer,
        ]
    return {
        "steered": steered,
        "deadline": [
            call("Starting the build (it takes a while).", f"sleep {BUILD_S} && echo built"),
            {"text": "The build was still running when time ran out: no result yet."},
        ],
        "cancelled": [call("Counting to ten.", count), {"text": "Done counting."}],
    }


@contextlib.contextmanager
def open_servers(demo: Client, names: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """One scripted model server per run, for the ``with`` block."""
    from tether.modelserver import open_model_server

    replies = scripts(demo)
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(open_model_server(replies[name])) for name in names}


def spawn_options(
    agent: str, demo: Client, server: Any, workdir: Path, name: str
) -> dict[str, Any]:
    """The ``spawn`` keywords of one run on ``agent``."""
    home = workdir.parent / f".home-{name}"
    home.mkdir(mode=0o700, exist_ok=True)
    env, agent_args = demo.configure(server.url, home)
    options: dict[str, Any] = {"agent": agent, "agent_args": agent_args, "env": env}
    if name == "deadline":
        options |= {"deadline_s": DEADLINE_S, "finalize_after_s": FINALIZE_AFTER_S}
    return options
