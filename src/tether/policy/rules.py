"""Approval rules, sans-IO: ``KIND[:GLOB]`` parsed, matched and weighed.

A rule names a kind of action and, optionally, a glob over the action's subject (the
command a shell call runs, the path an edit or a read touches, the URL a web call
fetches): ``shell:git status*``, ``edit:src/**``, ``read``. ``KIND`` is one of the
kinds tether normalizes across agents (:data:`KINDS`) or an agent's own tool name
(``Bash``, ``exec_command``, ``mcp__github__create_issue``); it is compared without case.

Globs: ``?`` is one character, ``*`` any run of characters and ``**`` too; for the path
kinds (``edit``, ``read``) ``*`` and ``?`` stop at ``/`` and only ``**`` crosses it.
Every other character stands for itself. Matching simulates the glob as a set of
positions (a bit mask), one step per character of the subject: linear in the subject,
whatever the glob (a regular expression with many ``*`` backtracks without bound).

:func:`parse_rule` returns a :class:`Rule` or a :class:`RuleError`, never raises.
:meth:`Policy.evaluate` weighs a call: a matching deny rule wins over any approve rule;
an approve rule must match every subject of the call (an edit of three files is
approved only when each is); no match leaves the call to a person. An approve rule's
glob never vouches for a shell command that chains or redirects (``;``, ``&``, ``|``,
`````, ``$``, ``(``, ``)``, ``<``, ``>``, a newline) unless the glob itself has that
character: ``shell:git status*`` approves ``git status --short`` but not ``git status;
rm -rf x`` (which a person then decides). Deny rules match any command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import ClassVar, Final, Literal, NamedTuple

__all__ = [
    "KINDS",
    "MAX_RULES",
    "MAX_RULE_CHARS",
    "MAX_SUBJECT_CHARS",
    "PATH_KINDS",
    "SHELL_OPERATORS",
    "Call",
    "Match",
    "Policy",
    "Rule",
    "RuleError",
    "parse_rule",
    "parse_rules",
    "policy_of",
]

KINDS: Final = ("shell", "edit", "read", "web", "mcp")
PATH_KINDS: Final = frozenset({"edit", "read"})
MAX_RULE_CHARS: Final = 4096
MAX_RULES: Final = 1000
# A subject longer than this is matched on its first MAX_SUBJECT_CHARS characters and
# can never be approved by a glob (it may still be denied): see Policy.evaluate.
MAX_SUBJECT_CHARS: Final = 65_536
# What chains, substitutes or redirects in a shell command line (see the module docstring).
SHELL_OPERATORS: Final = frozenset(";&|`$()<>\n")
_KIND: Final = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

Decision = Literal["approve", "deny"]


class RuleError(NamedTuple):
    """Why a rule's text is not a rule (say it to the user as is)."""

    text: str
    reason: str

    def __str__(self) -> str:
        return f"bad rule {self.text[:80]!r}: {self.reason}" if self.text else self.reason


class Call(NamedTuple):
    """What a policy weighs: the agent's tool, its normalized kind, its subjects."""

    tool: str
    kind: str
    subjects: tuple[str, ...] = ()


class Rule(NamedTuple):
    """One parsed rule: its kind (lower case), its glob (None: any subject), its text."""

    kind: str
    glob: str | None
    text: str

    def names(self, call: Call) -> bool:
        """The rule's kind is the call's kind or its tool's name."""
        return self.kind in (call.kind.lower(), call.tool.lower())

    def matches(self, subject: str) -> bool:
        """The glob matches all of ``subject`` (no glob matches anything)."""
        if self.glob is None:
            return True
        return _Glob.of(self.glob, self.kind in PATH_KINDS).matches(subject)


class Match(NamedTuple):
    """A policy's decision on a call and the rule that made it."""

    decision: Decision
    rule: Rule


def parse_rule(text: object) -> Rule | RuleError:
    """``KIND[:GLOB]`` as a :class:`Rule`, or why it is not one. Never raises."""
    if not isinstance(text, str):
        return RuleError(repr(text)[:80], "a rule is a string")
    if len(text) > MAX_RULE_CHARS:
        return RuleError(text[:80], f"longer than {MAX_RULE_CHARS} characters")
    stripped = text.strip()
    kind, colon, glob = stripped.partition(":")
    kind = kind.strip()
    if not _KIND.fullmatch(kind):
        why = "no kind" if not kind else f"kind {kind[:40]!r} is not a kind or a tool name"
        return RuleError(text, f"{why} (KIND[:GLOB], e.g. shell:git status*)")
    if not colon:
        return Rule(kind.lower(), None, stripped)
    glob = glob.strip()  # subjects are stripped too
    if not glob:
        return RuleError(text, "nothing after ':' (leave out the ':' to match any subject)")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in glob):
        return RuleError(text, "the glob holds a control character")
    return Rule(kind.lower(), glob, stripped)


def parse_rules(texts: Iterable[object]) -> list[Rule] | RuleError:
    """Every rule parsed, or the first error (at most :data:`MAX_RULES` rules)."""
    rules: list[Rule] = []
    for text in texts:
        if len(rules) >= MAX_RULES:
            return RuleError(str(text)[:80], f"more than {MAX_RULES} rules")
        rule = parse_rule(text)
        if isinstance(rule, RuleError):
            return rule
        rules.append(rule)
    return rules


class Policy(NamedTuple):
    """Approve and deny rules (deny wins); see the module docstring."""

    approve: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.approve or self.deny)

    def plus(self, other: Policy) -> Policy:
        """Both policies' rules (deny still wins over every approve)."""
        return Policy(self.approve + other.approve, self.deny + other.deny)

    def evaluate(self, call: Call) -> Match | None:
        """The decision the rules make on ``call``, or None when none decides it."""
        subjects = call.subjects or ("",)
        for rule in self.deny:
            if rule.names(call) and any(rule.matches(_cut(s)) for s in subjects):
                return Match("deny", rule)
        for rule in self.approve:
            if rule.names(call) and all(_approvable(rule, call, s) for s in subjects):
                return Match("approve", rule)
        return None

    def texts(self) -> dict[str, list[str]]:
        return {"approve": [r.text for r in self.approve], "deny": [r.text for r in self.deny]}


def _cut(subject: str) -> str:
    return subject[:MAX_SUBJECT_CHARS]


def _approvable(rule: Rule, call: Call, subject: str) -> bool:
    """An approve rule with a glob never vouches for a subject too long to match whole,
    nor for a shell command with an operator its glob does not have."""
    if rule.glob is None:
        return True
    if len(subject) > MAX_SUBJECT_CHARS:
        return False
    if call.kind == "shell" and (SHELL_OPERATORS & set(subject)) - set(rule.glob):
        return False
    return rule.matches(subject)


def policy_of(approve: Sequence[object], deny: Sequence[object]) -> Policy | RuleError:
    """A policy from two lists of rule texts, or the first bad rule."""
    approved = parse_rules(approve)
    if isinstance(approved, RuleError):
        return approved
    denied = parse_rules(deny)
    if isinstance(denied, RuleError):
        return denied
    if len(approved) + len(denied) > MAX_RULES:
        return RuleError("", f"more than {MAX_RULES} rules")
    return Policy(tuple(approved), tuple(denied))


# -- globs ------------------------------------------------------------------------------

_ONE, _STAR, _STARS = "?", "*", "**"


class _Glob:
    """A compiled glob: the tokens as bit masks (see the module docstring)."""

    _cache: ClassVar[dict[tuple[str, bool], _Glob]] = {}

    def __init__(self, glob: str, paths: bool) -> None:
        tokens = _tokens(glob)
        self.size = len(tokens)
        self.paths = paths
        self.literal: dict[str, int] = {}  # char -> positions whose literal is that char
        self.one = 0  # positions of `?`
        self.star = 0  # positions of `*`
        self.stars = 0  # positions of `**`
        for position, token in enumerate(tokens):
            bit = 1 << position
            if token == _ONE:
                self.one |= bit
            elif token == _STAR:
                self.star |= bit
            elif token == _STARS:
                self.stars |= bit
            else:
                self.literal[token] = self.literal.get(token, 0) | bit
        self.accept = 1 << self.size

    @classmethod
    def of(cls, glob: str, paths: bool) -> _Glob:
        key = (glob, paths)
        found = cls._cache.get(key)
        if found is None:
            if len(cls._cache) > 4096:
                cls._cache.clear()
            found = cls._cache[key] = cls(glob, paths)
        return found

    def _closure(self, state: int) -> int:
        # a star may match nothing: from its position, go on past it (stars never sit
        # side by side after _tokens, so one pass reaches every position)
        return state | ((state & (self.star | self.stars)) << 1)

    def matches(self, subject: str) -> bool:
        state = self._closure(1)
        for char in subject:
            crosses = not (self.paths and char == "/")
            step = self.literal.get(char, 0)
            stay = self.stars
            if crosses:
                step |= self.one
                stay |= self.star
            state = self._closure(((state & step) << 1) | (state & stay))
            if not state:
                return False
        return bool(state & self.accept)


def _tokens(glob: str) -> list[str]:
    """The glob's tokens: one per character, a run of stars one token (``*``, or ``**``
    for two or more), so no two star tokens are ever side by side."""
    tokens: list[str] = []
    index = 0
    while index < len(glob):
        end = index
        while end < len(glob) and glob[end] == "*":
            end += 1
        if end == index:
            tokens.append(glob[index])
            index += 1
        else:
            tokens.append(_STARS if end - index >= 2 else _STAR)
            index = end
    return tokens
