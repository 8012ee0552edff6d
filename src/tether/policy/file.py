"""A policy file: TOML with two lists of rules, read from text (the caller reads the file).

::

    # tether policy
    approve = ["read", "shell:git status*", "shell:git diff*", "edit:src/**"]
    deny = ["shell:rm *", "shell:git push*", "web"]

Both keys are optional; any other key, a value that is not a list of strings, or a bad
rule is an error that names it. :func:`policy_from_text` never raises.
"""

from __future__ import annotations

import tomllib
from typing import Final

from tether.policy.rules import Policy, RuleError, policy_of

__all__ = ["MAX_POLICY_BYTES", "policy_from_text"]

MAX_POLICY_BYTES: Final = 1024 * 1024
_KEYS: Final = ("approve", "deny")


def policy_from_text(text: str, where: str = "policy") -> Policy | RuleError:
    """The policy a policy file's ``text`` says, or why it says none (``where`` names the
    file in the reason)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        return RuleError("", f"{where} is larger than {MAX_POLICY_BYTES} bytes")
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        return RuleError("", f"{where} is not TOML: {exc}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        return RuleError("", f"{where}: unknown key {unknown[0]!r} (known: approve, deny)")
    lists: dict[str, list[object]] = {}
    for key in _KEYS:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return RuleError("", f"{where}: {key} must be a list of rule strings")
        lists[key] = value
    policy = policy_of(lists["approve"], lists["deny"])
    if isinstance(policy, RuleError):
        return RuleError(policy.text, f"{where}: {policy.reason}")
    return policy
