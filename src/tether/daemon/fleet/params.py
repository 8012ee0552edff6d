"""What the ``agent.*`` verbs take: one msgspec Struct per verb's params (their replies are
in :mod:`tether.daemon.fleet.replies`). ``agent.spawn``'s :class:`SpawnRequest` is the run's
:class:`~tether.runtime.parent.options.SpawnOptions` with the agent's own fields beside it.
Decoding one is :func:`tether.daemon.rpc.methods.decode_params` (``invalid_params``).
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

import msgspec

from tether.daemon.fleet.replies import PTY_MAX_SIZE, PTY_MIN_SIZE
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.numbers import Seconds
from tether.procs import nul_problem
from tether.runtime.parent.options import SpawnOptions

__all__ = [
    "MAX_EVENTS",
    "NAME_RULE",
    "AskParams",
    "EventsParams",
    "FinalizeParams",
    "ListParams",
    "NameParams",
    "RmParams",
    "SpawnParams",
    "SpawnRequest",
    "StatusParams",
    "StopParams",
    "TextParams",
    "check_name",
]

NAME_RULE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_EVENTS: Final = 10_000
PtySize = Annotated[int, msgspec.Meta(ge=PTY_MIN_SIZE, le=PTY_MAX_SIZE)]
HostName = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]{1,64}$")]


def check_name(name: str) -> str:
    if not NAME_RULE.fullmatch(name):
        raise RpcFailure(
            ErrorCode.INVALID_PARAMS,
            f"invalid agent name {name[:80]!r}: use 1-64 characters of A-Z a-z 0-9 _ -",
        )
    return name


class SpawnParams(SpawnOptions, frozen=True, kw_only=True):
    """``agent.spawn``'s parameters: the run's :class:`SpawnOptions` and the agent's own."""

    name: str
    task: str | None = None
    channel_id: str | None = None
    wait: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        # Everything that reaches exec (the command, the environment, cwd): a NUL byte
        # there is invalid_params, refused before the name is reserved.
        for name in _EXEC_FIELDS:
            problem = nul_problem(name, getattr(self, name))
            if problem is not None:
                raise ValueError(problem)

    def options(self) -> SpawnOptions:
        """The run's options alone."""
        fields = {name: getattr(self, name) for name in SpawnOptions.__struct_fields__}
        return SpawnOptions(**fields)


_EXEC_FIELDS: Final = (
    "name",
    "agent",
    "agent_args",
    "provider",
    "model",
    "cwd",
    "argv",
    "script",
    "env",
    "child_args",
    "approve",
    "deny",
    "policy",
    "no_one_to_ask",
)


class NameParams(msgspec.Struct, frozen=True):
    name: str


class StatusParams(msgspec.Struct, frozen=True):
    name: str | None = None  # none: the daemon's own status (fno-agents' agent.status {})


class AskParams(msgspec.Struct, frozen=True):
    """``text`` (or fno-agents' ``message``); ``provider``/``agent`` create the agent on first
    contact; ``timeout`` is fno-agents' name for ``timeout_s``."""

    name: str
    text: str | None = None
    message: str | None = None
    timeout_s: Seconds | None = None
    timeout: Seconds | None = None
    provider: str | None = None
    agent: str | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.message is None):
            raise ValueError("give the message as text (or message), once")

    @property
    def body(self) -> str:
        return self.text if self.text is not None else self.message or ""

    @property
    def wait_s(self) -> float | None:
        return self.timeout_s if self.timeout_s is not None else self.timeout


class ListParams(msgspec.Struct, frozen=True):
    """fno-agents' filters (all optional; ``all`` and the rest are accepted and ignored)."""

    cwd: str | None = None
    provider: str | None = None
    status: str | None = None


class TextParams(msgspec.Struct, frozen=True):
    name: str
    text: str


class UnqueueParams(msgspec.Struct, frozen=True):
    name: str
    ref: Annotated[int, msgspec.Meta(ge=1, le=2**53 - 1)]


class FinalizeParams(msgspec.Struct, frozen=True):
    name: str
    note: str | None = None


class StopParams(msgspec.Struct, frozen=True):
    name: str
    mode: Literal["close", "finalize", "cancel"] = "close"
    timeout_s: Seconds = 10.0
    note: str | None = None


class RmParams(msgspec.Struct, frozen=True):
    name: str
    force: bool = False  # kill a live agent first; drop its worktree's unmerged work
    keep_branch: bool = False  # keep its worktree's branch (its work committed on it)


class EventsParams(msgspec.Struct, frozen=True):
    name: str
    after_seq: Annotated[int, msgspec.Meta(ge=0)] = 0
    follow: bool = False
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_EVENTS)] = 1000
    wait_s: Seconds | None = None  # without follow: wait this long for a first event


class SpawnRequest(SpawnParams, frozen=True, kw_only=True):
    """``agent.spawn``: the wire agent's :class:`SpawnParams`, and the call's own."""

    timeout_s: Seconds | None = None
    host: HostName | None = None  # in a cluster: start it on this host
    message: str | None = None  # fno-agents' name for task
    channel: bool = False  # agent "claude": load `tether mcp-channel` into its session
    pty: bool = False
    cols: PtySize = 80
    rows: PtySize = 24

    def spawn_params(self) -> SpawnRequest:
        """With fno-agents' ``message`` read as ``task``."""
        if self.message is None or self.task is not None:
            return self
        return msgspec.structs.replace(self, task=self.message, message=None)
