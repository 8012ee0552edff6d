"""Approval rules: the parser is total, globs match as a reference matcher does, deny wins."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tether.policy import Call, Match, Policy, Rule, RuleError, call_of, parse_rule, policy_of
from tether.policy.file import policy_from_text
from tether.policy.rules import MAX_RULE_CHARS, MAX_SUBJECT_CHARS, PATH_KINDS, SHELL_OPERATORS

KIND_TEXT = st.from_regex(r"[A-Za-z0-9_.\-]{1,20}", fullmatch=True)
GLOB_TEXT = st.text(alphabet="ab/*? .;", min_size=1, max_size=12).filter(lambda g: g.strip())
SUBJECT = st.text(alphabet="ab/ .;|", max_size=16)


def reference(glob: str, subject: str, paths: bool) -> bool:
    """The glob as a regular expression (fine for the short inputs used here)."""
    pattern = ""
    for token in re.findall(r"\*+|.", glob, re.S):
        if token.startswith("*"):
            pattern += ".*" if len(token) > 1 or not paths else "[^/]*"
        elif token == "?":
            pattern += "[^/]" if paths else "."
        else:
            pattern += re.escape(token)
    return re.fullmatch(pattern, subject, re.S) is not None


@given(st.one_of(st.text(max_size=200), st.integers(), st.none(), st.binary(max_size=20)))
def test_parse_rule_is_total(text: object) -> None:
    assert isinstance(parse_rule(text), Rule | RuleError)


@given(KIND_TEXT, GLOB_TEXT)
def test_a_rule_reads_back_its_kind_and_glob(kind: str, glob: str) -> None:
    rule = parse_rule(f"{kind}:{glob}")
    assert isinstance(rule, Rule), rule
    assert rule.kind == kind.lower()
    assert rule.glob == glob.strip()
    bare = parse_rule(f"  {kind}  ")
    assert bare == Rule(kind.lower(), None, kind)


@given(GLOB_TEXT, SUBJECT, st.sampled_from(["shell", "edit"]))
def test_globs_match_as_the_reference_does(glob: str, subject: str, kind: str) -> None:
    rule = parse_rule(f"{kind}:{glob}")
    assert isinstance(rule, Rule)
    assert rule.glob is not None
    assert rule.matches(subject) == reference(rule.glob, subject, kind in PATH_KINDS)


def test_reference_examples() -> None:
    git = parse_rule("shell:git status*")
    src = parse_rule("edit:src/**")
    one = parse_rule("edit:src/*.py")
    assert isinstance(git, Rule)
    assert isinstance(src, Rule)
    assert isinstance(one, Rule)
    assert git.matches("git status --short")
    assert not git.matches("git push")
    assert src.matches("src/a/b/c.py")
    assert not src.matches("srcx/a.py")
    assert one.matches("src/a.py")
    assert not one.matches("src/a/b.py")
    shell_star = parse_rule("shell:rm *")
    assert isinstance(shell_star, Rule)
    assert shell_star.matches("rm -rf /tmp/x")


def test_bad_rules_say_why() -> None:
    for text, words in [
        ("", "no kind"),
        (":x", "no kind"),
        ("shell:", "nothing after"),
        ("sh ell", "not a kind"),
        ("shell:a\nb", "control character"),
        ("x" * (MAX_RULE_CHARS + 1), "longer than"),
    ]:
        error = parse_rule(text)
        assert isinstance(error, RuleError), text
        assert words in error.reason, (text, error)


def test_a_hostile_glob_matches_in_one_pass() -> None:
    rule = parse_rule("shell:" + "*a" * 200 + "b")
    assert isinstance(rule, Rule)
    assert not rule.matches("a" * 50_000)  # a backtracking matcher never returns


RULES = st.lists(st.builds(lambda k, g: f"{k}:{g}", st.sampled_from(["shell", "edit"]), GLOB_TEXT))


@given(RULES, RULES, st.sampled_from(["shell", "edit"]), st.lists(SUBJECT, max_size=3))
def test_deny_wins_and_approve_covers_every_subject(
    approve: list[str], deny: list[str], kind: str, subjects: list[str]
) -> None:
    policy = policy_of(approve, deny)
    assert isinstance(policy, Policy)
    call = Call("tool", kind, tuple(subjects))
    match = policy.evaluate(call)
    subjects = subjects or [""]
    denied = any(r.names(call) and any(r.matches(s) for s in subjects) for r in policy.deny)

    def vouches(rule: Rule, subject: str) -> bool:
        operators = SHELL_OPERATORS & set(subject) if kind == "shell" else set()
        return rule.matches(subject) and not operators - set(rule.glob or "")

    approved = any(r.names(call) and all(vouches(r, s) for s in subjects) for r in policy.approve)
    if denied:
        assert match is not None
        assert match.decision == "deny"
    elif approved:
        assert match is not None
        assert match.decision == "approve"
    else:
        assert match is None
    # more approve rules never undo a deny
    wider = policy.plus(Policy(approve=(Rule(kind, None, kind),)))
    if denied:
        widened = wider.evaluate(call)
        assert widened is not None
        assert widened.decision == "deny"


def test_rules_name_a_kind_or_the_agents_own_tool() -> None:
    policy = policy_of(["Bash:ls*", "exec_command"], [])
    assert isinstance(policy, Policy)
    bash = call_of("claude", "Bash", {"command": "ls -la"})
    assert bash.kind == "shell"
    assert policy.evaluate(bash) is not None
    codex = Call("exec_command", "shell", ("rm x",))
    assert policy.evaluate(codex) is not None


def test_an_overlong_subject_is_never_approved_by_a_glob() -> None:
    policy = policy_of(["shell:*"], [])
    assert isinstance(policy, Policy)
    assert policy.evaluate(Call("Bash", "shell", ("x" * (MAX_SUBJECT_CHARS + 1),))) is None
    bare = policy_of(["shell"], [])
    assert isinstance(bare, Policy)
    assert bare.evaluate(Call("Bash", "shell", ("x" * (MAX_SUBJECT_CHARS + 1),))) is not None


def test_policy_files() -> None:
    policy = policy_from_text('approve = ["read", "shell:git status*"]\ndeny = ["shell:rm *"]\n')
    assert isinstance(policy, Policy)
    assert policy.texts() == {"approve": ["read", "shell:git status*"], "deny": ["shell:rm *"]}
    for text, words in [
        ("approve = [", "not TOML"),
        ("allow = []", "unknown key 'allow'"),
        ('approve = "read"', "list of rule strings"),
        ("deny = [1]", "list of rule strings"),
        ('deny = ["sh ell"]', "not a kind"),
    ]:
        error = policy_from_text(text, "p.toml")
        assert isinstance(error, RuleError), text
        assert words in str(error), (text, error)
        assert "p.toml" in str(error)


@given(st.text(max_size=300))
def test_policy_from_text_is_total(text: str) -> None:
    assert isinstance(policy_from_text(text), Policy | RuleError)


def test_an_approve_glob_never_vouches_for_a_chained_shell_command() -> None:
    policy = policy_of(["shell:git status*", "shell:make *; echo done"], ["shell:rm *"])
    assert isinstance(policy, Policy)
    approve = Match("approve", Rule("shell", "git status*", "shell:git status*"))
    assert policy.evaluate(Call("Bash", "shell", ("git status --short",))) == approve
    for chained in ("git status; rm -rf x", "git status && curl x", "git status | sh",
                    "git status > /etc/x", "git status $(id)", "git status `id`",
                    "git status\nrm x"):  # fmt: skip
        assert policy.evaluate(Call("Bash", "shell", (chained,))) is None, chained
    assert policy.evaluate(Call("Bash", "shell", ("make all; echo done",))) is not None
    denied = policy.evaluate(Call("Bash", "shell", ("rm x; ls",)))
    assert denied is not None
    assert denied.decision == "deny"
