"""Approval policy, sans-IO: rules (``KIND[:GLOB]``), policy files, each agent's tool kinds.

Nothing here touches files, processes or the clock: a policy weighs a
:class:`~tether.policy.rules.Call` and says approve, deny, or nothing (a person decides).
"""

from __future__ import annotations

from tether.policy.file import policy_from_text
from tether.policy.kinds import TOOL_KINDS, call_of, kind_of
from tether.policy.rules import (
    KINDS,
    Call,
    Match,
    Policy,
    Rule,
    RuleError,
    parse_rule,
    parse_rules,
    policy_of,
)

__all__ = [
    "KINDS",
    "TOOL_KINDS",
    "Call",
    "Match",
    "Policy",
    "Rule",
    "RuleError",
    "call_of",
    "kind_of",
    "parse_rule",
    "parse_rules",
    "policy_from_text",
    "policy_of",
]
