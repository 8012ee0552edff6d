"""The ``subagent`` tool: run a sub-task in a child run and return its final answer.

``subagent {task, timeout_s?}`` starts a child with the ``spawn`` it was given (in
``tether child``, :func:`tether.runtime.parent.spawn.spawn`: the same parent every other run
uses: private run directory, the wire, never-hang rules), waits for its result and
returns the final text. Several calls may run at once. The parent runtime sits above
this layer, so it is handed in, never imported.

Caps (so an agent cannot fork without bound):

- depth: a run started by a subagent has ``TETHER_SUBAGENT_DEPTH`` one higher than its
  parent; at :data:`MAX_DEPTH` the tool refuses.
- fan-out: at most :data:`MAX_CONCURRENT` subagents of one parent run at once; a call
  beyond that is refused (the model can wait for one to finish and try again).

The child runs with the parent's provider and model (``TETHER_PROVIDER`` /
``TETHER_MODEL``, which the parent runtime passes down); ``TETHER_SUBAGENT_SCRIPT``
gives scripted sub-runs their own replies and ``TETHER_SUBAGENT_ARGV`` (a JSON list)
replaces the child command entirely. The sub-run is recorded in the run index with its
parent run, so ``tether show`` lists it and ``tether run`` shows it nested.

Cancelling the tool (the turn was interrupted, the run cancelled) cancels the sub-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from tether import jsondepth
from tether.agent.tools import ToolContext, ToolOutput
from tether.errors import TetherError
from tether.wire.env import read_wire_env

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_CONCURRENT",
    "MAX_DEPTH",
    "SpawnRun",
    "SubRun",
    "SubRunResult",
    "SubagentTool",
]

MAX_DEPTH: Final = 2
MAX_CONCURRENT: Final = 4
DEFAULT_TIMEOUT_S: Final = 300.0
MAX_TIMEOUT_S: Final = 3600.0
DEPTH_ENV: Final = "TETHER_SUBAGENT_DEPTH"
MAX_TASK_CHARS: Final = 32_000


class SubRunResult(Protocol):
    """What the tool reads of a finished sub-run (``tether.RunResult`` is one)."""

    @property
    def status(self) -> str: ...
    @property
    def final_text(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def run_id(self) -> str: ...


class SubRun(Protocol):
    """A started sub-run (``tether.RunHandle`` is one)."""

    async def wait(self) -> SubRunResult: ...
    async def aclose(self) -> object: ...


# ``spawn(task, *, argv | provider/model/child_args, cwd, deadline_s, finalize_after_s,
# env, parent_run)``, as :func:`tether.runtime.parent.spawn.spawn`.
SpawnRun = Callable[..., Awaitable[SubRun]]


class SubagentTool:
    """The tool object (see :class:`tether.agent.tools.Tool`)."""

    name = "subagent"
    description = (
        "Delegate a self-contained sub-task to a separate agent and get back its final "
        "answer. The sub-agent has the same tools and working directory but none of your "
        "conversation, so state the task completely. Several may run at once."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 (read-only by convention)
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "the complete task for the sub-agent"},
            "timeout_s": {
                "type": "number",
                "description": f"seconds before it must answer (default {DEFAULT_TIMEOUT_S:g})",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_S,
            },
        },
        "required": ["task"],
    }

    def __init__(
        self,
        *,
        spawn: SpawnRun | None,
        max_depth: int = MAX_DEPTH,
        max_concurrent: int = MAX_CONCURRENT,
    ) -> None:
        self.spawn = spawn
        self.max_depth = max_depth
        self.max_concurrent = max_concurrent
        self.active = 0

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return "subagent: 'task' must be a non-empty string", True
        if len(task) > MAX_TASK_CHARS:
            return f"subagent: 'task' is longer than {MAX_TASK_CHARS} characters", True
        timeout = _timeout(arguments.get("timeout_s"))
        if timeout is None:
            return f"subagent: 'timeout_s' must be a number from 1 to {MAX_TIMEOUT_S:g}", True
        depth = _depth(context.env)
        if depth >= self.max_depth:
            return (
                f"subagent: nesting limit reached (this run is at depth {depth}, the limit is "
                f"{self.max_depth}); do this part yourself",
                True,
            )
        if self.active >= self.max_concurrent:
            return (
                f"subagent: {self.active} subagents are already running (the limit is "
                f"{self.max_concurrent}); wait for one to finish, then try again",
                True,
            )
        self.active += 1
        try:
            return await self._run(task, timeout, depth, context)
        finally:
            self.active -= 1

    async def _run(self, task: str, limit_s: float, depth: int, context: ToolContext) -> ToolOutput:
        spawn = self.spawn
        if spawn is None:
            return "subagent: this agent was built without a way to start sub-runs", True
        env = context.env
        try:
            handle = await spawn(
                task,
                **_child_command(env),
                cwd=context.cwd,
                deadline_s=limit_s,
                finalize_after_s=max(1.0, limit_s * 0.8),
                env={DEPTH_ENV: str(depth + 1)},
                parent_run=read_wire_env(env, "RUN_ID"),
            )
        except (TetherError, OSError) as exc:
            return f"subagent: could not start: {exc}", True
        try:
            result = await handle.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(handle.aclose())
            raise
        if result.status == "done":
            return result.final_text or "(the subagent gave an empty answer)", False
        reason = f": {result.error}" if result.error else ""
        return f"subagent {result.status} (run {result.run_id}){reason}", True


def _timeout(value: object) -> float | None:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 1 <= value <= MAX_TIMEOUT_S:
        return None
    return float(value)


def _depth(env: Mapping[str, str]) -> int:
    try:
        return max(0, int(env.get(DEPTH_ENV, "0")))
    except ValueError:
        return 0


def _child_command(env: Mapping[str, str]) -> dict[str, Any]:
    """``spawn`` keywords for the child command, from the environment."""
    raw = env.get("TETHER_SUBAGENT_ARGV")
    if raw:
        with contextlib.suppress(ValueError):
            argv = jsondepth.loads(raw)
            if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
                return {"argv": argv}
    options: dict[str, Any] = {
        "provider": env.get("TETHER_PROVIDER") or None,
        "model": env.get("TETHER_MODEL") or None,
    }
    script = env.get("TETHER_SUBAGENT_SCRIPT")
    if script:
        options["child_args"] = ["--script", os.path.abspath(script)]
    return options
