"""A run's approval settings, checked: what ``tether child``'s flags and a parent's run
options say (rules, a policy file, the timeout and its default, "no one to ask", the
built-in agent's ``approval="ask"``). Cheap to import: ``tether child`` reads it before
``ready``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, NamedTuple

from tether.policy.rules import Policy

__all__ = ["DeskConfig", "desk_config"]

Decision = Literal["approve", "deny"]


class DeskConfig(NamedTuple):
    """How a run's approvals are decided (the parent's run options; ``tether child``'s
    flags: :meth:`to_args`, :func:`desk_config`); see :mod:`tether.agent.desk`."""

    policy: Policy = Policy()
    timeout_s: float | None = None  # with `default`: decide this way when the time is up
    default: Decision | None = None
    nobody: str | None = None  # "no one to ask": deny at once with this note
    ask: bool = False  # the built-in agent's bash, write and edit ask first

    def to_args(self) -> list[str]:
        """``tether child``'s flags for this configuration."""
        args = ["--approval", "ask"] if self.ask else []
        args += [f"--approve={rule.text}" for rule in self.policy.approve]
        args += [f"--deny={rule.text}" for rule in self.policy.deny]
        if self.timeout_s is not None and self.default is not None:
            args += [f"--approval-timeout={self.timeout_s!r}", f"--approval-default={self.default}"]
        if self.nobody is not None:
            args.append(f"--no-one-to-ask={self.nobody}")
        return args


def desk_config(
    *,
    approval: str | None = None,
    approve: Iterable[str] = (),
    deny: Iterable[str] = (),
    policy_text: str | None = None,
    policy_name: str = "policy file",
    timeout_s: float | None = None,
    default: str | None = None,
    nobody: str | None = None,
) -> DeskConfig | str:
    """A checked configuration from a run's options, or what is wrong with them (a usage
    error: a bad rule or policy file, a timeout without a default or the other way round,
    an unknown approval mode)."""
    from tether.policy.file import policy_from_text
    from tether.policy.rules import RuleError, policy_of

    if approval not in (None, "ask", "auto"):
        return f"approval must be 'ask' or 'auto', not {approval!r}"
    if (timeout_s is None) != (default is None):
        return "approval_timeout and approval_default go together: give both or neither"
    if default not in (None, "approve", "deny"):
        return f"approval_default must be approve or deny, not {default!r}"
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s >= 0):
        return f"approval_timeout must be a number of seconds >= 0, not {timeout_s!r}"
    policy = policy_of(list(approve), list(deny))
    if isinstance(policy, RuleError):
        return str(policy)
    if policy_text is not None:
        from_file = policy_from_text(policy_text, policy_name)
        if isinstance(from_file, RuleError):
            return str(from_file)
        policy = policy.plus(from_file)
    chosen: Decision | None = None
    if default is not None:
        chosen = "approve" if default == "approve" else "deny"
    return DeskConfig(policy, timeout_s, chosen, nobody, approval == "ask")
