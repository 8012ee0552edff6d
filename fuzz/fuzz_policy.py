"""Fuzz the approval rule parser, the glob matcher and the policy file reader.

Properties checked for every input (bytes read as UTF-8, invalid bytes replaced):

- :func:`parse_rule` and :func:`policy_from_text` never raise; a parsed rule's kind is
  lower case and its text is the input stripped;
- a rule's glob matches a subject exactly when a regular expression built from it does
  (on short inputs, where the backtracking reference is safe), and never raises;
- a policy that denies a call still denies it with any approve rule added.

``python fuzz/fuzz_policy.py [N]``: atheris when installed, else a random loop of N inputs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

from tether.policy import Call, Policy, Rule, RuleError, parse_rule, policy_from_text
from tether.policy.rules import PATH_KINDS

TOKENS = [b"*", b"**", b"?", b"/", b":", b"shell:", b"edit:", b"read", b"\n", b"\x00", b"\xff"]
SEEDS = [
    b"shell:git status*",
    b"edit:src/**",
    b"read",
    b"mcp:github.*",
    b'approve = ["read", "shell:git *"]\ndeny = ["shell:rm *"]',
    b"Bash:ls?-la",
]
SUBJECTS = ["", "git status", "src/a/b.py", "a*b", "rm -rf /", "??", "/", "src/", "ab/cd"]


def reference(glob: str, subject: str, paths: bool) -> bool:
    pattern = ""
    for token in re.findall(r"\*+|.", glob, re.S):
        if token.startswith("*"):
            pattern += ".*" if len(token) > 1 or not paths else "[^/]*"
        elif token == "?":
            pattern += "[^/]" if paths else "."
        else:
            pattern += re.escape(token)
    return re.fullmatch(pattern, subject, re.S) is not None


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    rule = parse_rule(text)
    assert isinstance(rule, Rule | RuleError), rule
    assert isinstance(policy_from_text(text), Policy | RuleError)
    if isinstance(rule, RuleError):
        assert rule.reason
        return
    assert rule.kind == rule.kind.lower()
    assert rule.text == text.strip()
    short = rule.glob is None or (len(rule.glob) <= 24 and rule.glob.count("*") <= 6)
    for subject in [*SUBJECTS, text[:40]]:
        matched = rule.matches(subject)
        if rule.glob is not None and short:
            assert matched == reference(rule.glob, subject, rule.kind in PATH_KINDS), (
                rule,
                subject,
            )
        call = Call(rule.kind, rule.kind, (subject,))
        denied = Policy(deny=(rule,)).evaluate(call)
        widened = Policy(approve=(Rule(rule.kind, None, rule.kind),), deny=(rule,))
        if denied is not None:
            again = widened.evaluate(call)
            assert again is not None
            assert again.decision == "deny"


def random_loop(iterations: int, seed: int = 0) -> int:
    return harness.random_loop(one_input, SEEDS, TOKENS, iterations, seed)


if __name__ == "__main__":
    harness.main(one_input, SEEDS, TOKENS, 100_000)
