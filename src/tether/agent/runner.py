"""The turn runner interface: what the child presenter asks of the thing that runs turns.

The presenter owns the wire: the control file, the state table, acks, queues, turn
numbers, the result and the exit. A runner owns the agent: it runs one turn at a time
from an opening message until the agent stops, and reports display events (raw dicts
with the wire's kebab-case keys) through the ``emit`` callback it was built with; the
presenter normalizes and writes them. The built-in agent
(:class:`tether.agent.loop.Agent`) is one runner; a program speaking RESP on stdio can
be another.

The presenter builds the runner with a cheap factory before ``ready`` and then starts
:meth:`TurnRunner.prepare` (slow set-up: imports, connections, processes) right after
it, so ``ready`` comes quickly and a set-up failure still ends the run ``failed``.

During a turn the runner pulls from the presenter through :class:`TurnControl`:

- ``take_steering()`` before each model call: queued steer texts, to add as user
  messages (emitting ``steering-injected`` with the item's ``ref``);
- ``take_follow_ups()`` when the agent would otherwise end the turn: queued follow-ups
  (emitting ``follow-up-injected``), after which the turn goes on;
- ``interrupted`` / ``wait_interrupted()``: finalize asks the turn to stop at its next
  cooperative yield. The runner pairs unexecuted tool calls with cancelled results and
  returns with stop reason ``aborted``.

Abort (cancel, deadline, a fatal error) is asyncio cancellation of the task running
:meth:`TurnRunner.run_turn`: the runner must stop at once, ending any tool's process
group (see :mod:`tether.procs`), and let the CancelledError propagate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from tether.errors import AgentError

__all__ = [
    "EmitFn",
    "Injection",
    "InjectionKind",
    "Mortal",
    "RunnerFactory",
    "RunnerSetupError",
    "TurnControl",
    "TurnOutcome",
    "TurnRequest",
    "TurnRunner",
]

EmitFn = Callable[[Mapping[str, Any]], None]
InjectionKind = Literal["user", "steering", "follow-up"]

# NamedTuples, not dataclasses: this module is imported before `ready`, and start-up
# time matters (a frozen dataclass costs about a millisecond to create).


class Injection(NamedTuple):
    """A user message for the agent: a prompt, or a steer/follow-up with its control seq."""

    text: str
    kind: InjectionKind = "user"
    ref: int | None = None

    def event(self) -> dict[str, Any]:
        """The display event announcing it (``user`` or ``*-injected`` with ``ref``)."""
        if self.kind == "user":
            return {"type": "user", "text": self.text}
        kind = "steering-injected" if self.kind == "steering" else "follow-up-injected"
        out: dict[str, Any] = {"type": kind, "text": self.text}
        if self.ref is not None:
            out["ref"] = self.ref
        return out


class TurnRequest(NamedTuple):
    """One turn: its opening message; ``final`` for finalize's tool-free turn."""

    opening: Injection
    final: bool = False


class TurnOutcome(NamedTuple):
    """How a turn ended: the wire stop reason (``aborted``, ``error``, ...) and its usage.

    ``usage`` is the wire's usage object (``{"input": N, "output": N, ...}``).
    """

    stop_reason: str
    usage: Mapping[str, int] = {}
    error: str | None = None


class RunnerSetupError(AgentError):
    """The runner cannot work at all (bad provider configuration, a missing program)."""


class TurnControl(Protocol):
    """The presenter's side of a running turn (see the module docstring)."""

    @property
    def interrupted(self) -> bool: ...

    async def wait_interrupted(self) -> None: ...

    def take_steering(self) -> list[Injection]: ...

    def take_follow_ups(self) -> list[Injection]: ...


class TurnRunner(Protocol):
    """Runs turns for the presenter, one at a time."""

    async def prepare(self) -> None:
        """Slow set-up, started right after ``ready`` (imports, connections, processes).

        An exception here ends the run ``failed`` with its message. ``run_turn`` may be
        called before it finishes and must wait for it.
        """
        ...

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        """Run the agent from ``request.opening`` until it stops (see the module docstring)."""
        ...

    def final_text(self) -> str:
        """The text of the run's last assistant message ("" when there is none)."""
        ...

    async def aclose(self) -> None:
        """Stop anything still running (tool process groups, connections)."""
        ...


@runtime_checkable
class Mortal(Protocol):
    """A runner whose agent can die on its own (an agent CLI, a process of its own)."""

    async def gone(self) -> str:
        """Returns, with why, once the agent can run no more turns (its process died, not
        ended by the runner); the presenter then ends the run ``failed``, after the turn
        the death ended, so a later run can resume the agent's session."""
        ...


# Builds the runner before `ready` (keep it cheap; put slow work in `prepare`). An
# exception here ends the run `failed` before `ready`.
RunnerFactory = Callable[[EmitFn], Awaitable[TurnRunner]]
