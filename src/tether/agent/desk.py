"""The approval desk: where every approval and question of a run waits for its answer.

Theory of operation. One :class:`Desk` per child serves every adapter and the built-in
agent. An agent's request to run a tool (:class:`Request`) goes through, in order:

1. the run's policy (``--approve`` / ``--deny`` rules, a policy file, and the kinds a
   person answered "always" for): a rule that decides it settles it at once; the request
   is never written as one, but its decision is, as an inbox ``approval_decision`` line
   naming the rule (so it lands in SQLite beside the answers);
2. "no one to ask" (``DeskConfig.nobody``, set by a parent with no person behind it, e.g.
   ``tether run`` off a terminal): denied at once, with the note saying why;
3. otherwise an inbox ``approval_request`` line (its key is ``RUN:OFFSET``, as for every
   inbox message) and a wait, for as long as it takes: a run that set
   ``approval_timeout_s`` together with ``approval_default`` takes that default when the
   time is up, recorded as decided by the timeout. With no inbox there is no one to ask.

A question the ``ask`` tool stops waiting for (its timeout, the turn's end) gets a
``question_closed`` line naming its key, so nothing lists it as waiting any more.

The answer comes from the parent as an ``answer`` control (:meth:`Desk.check` before its
ack, then :meth:`Desk.resolve`) or, from a parent that does not speak it, as a steer or
follow-up whose text carries the key (:meth:`Desk.resolve_text`, the format of
:mod:`tether.inbox.answers`). Every decision becomes an ``approval_decision`` line and an
``info`` event; the caller gets a :class:`Verdict` and tells the agent in its own
protocol, with :meth:`Verdict.note` saying why. The built-in ``ask`` tool's questions
(``clarification`` lines) wait here the same way (:meth:`Desk.question`).

The desk owns no process and no file but the inbox it appends to; its waits are asyncio
futures on the child's one loop, cancelled with the turn that waits (a withdrawn request
is recorded as such).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

import msgspec

from tether.agent.runner import EmitFn
from tether.policy import Call, Policy, Rule, call_of
from tether.policy.config import DeskConfig
from tether.policy.kinds import relative_path

__all__ = [
    "BUILTIN_ASKING",
    "NOTHING_WAITS",
    "WRONG_ANSWER",
    "Desk",
    "Request",
    "Verdict",
]

Decision = Literal["approve", "deny"]
By = Literal["person", "rule", "timeout", "no-one", "withdrawn"]
# The built-in agent's tools that ask first under `approval="ask"`.
BUILTIN_ASKING: Final = frozenset({"bash", "write", "edit"})
SUMMARY_CHARS: Final = 200
# How the desk's rejections of an `answer` begin (a parent tells them from a child that
# does not know the control at all)
NOTHING_WAITS: Final = "no approval or question"
WRONG_ANSWER: Final = ("is an approval:", "is a question:")
MAX_INPUT_BYTES: Final = 256 * 1024  # an input larger than this is kept cut, marked so
_MARK: Final = "[tether answer "


class Request(NamedTuple):
    """One tool call an agent asks to make (untrusted input: read defensively)."""

    agent: str  # who asks: claude, codex, gemini, pi, builtin, ...
    table: str  # its tool kinds' table (tether.policy.kinds.TOOL_KINDS)
    tool: str  # the agent's own tool name
    arguments: object = None  # the tool's whole input as the agent sent it
    summary: str = ""  # a short description (the command, the path, the dialog's title)
    kind: str | None = None  # the kind, when the agent says it (ACP)
    paths: tuple[str, ...] = ()  # paths named beside the input (ACP locations, Codex files)
    choices: tuple[Any, ...] = ()  # what the agent offered to choose from
    cwd: str | None = None

    def call(self) -> Call:
        real = None if self.cwd is None else _real_paths(self.cwd)
        return call_of(
            self.table,
            self.tool,
            self.arguments,
            cwd=self.cwd,
            paths=self.paths,
            kind=self.kind,
            real=real,
        )


def _real_paths(cwd: str) -> Callable[[str], str]:
    """Where a path the agent names really leads, from ``cwd``: every symlink that exists
    followed (a repository's ``src/link -> /home/user`` included), relative to the real
    ``cwd`` when it stays below it, else absolute (which ``src/**`` never matches)."""
    base = os.path.realpath(cwd)

    def real(path: str) -> str:
        return relative_path(os.path.realpath(os.path.join(cwd, path)), base)

    return real


class Verdict(NamedTuple):
    """A decision on a request: which, by whom, and what the agent is told."""

    decision: Decision
    by: By
    key: str | None = None  # the inbox key of the request (None: never written)
    rule: str | None = None
    text: str = ""  # the person's words
    scope: Literal["once", "always"] = "once"

    @property
    def approved(self) -> bool:
        return self.decision == "approve"

    def note(self) -> str:
        """What the agent is told (one line)."""
        verdict = "approved" if self.approved else "denied"
        if self.by == "rule":
            why = f"{verdict} by the run's rule {self.decision} {self.rule}"
        elif self.by == "timeout":
            why = f"{verdict}: no answer in time (the run's approval default)"
        elif self.by == "no-one":
            why = f"{verdict}: no one to ask: {self.text}"
        elif self.by == "withdrawn":
            why = f"{verdict}: the request was withdrawn ({self.text})"
        else:
            why = f"{verdict} by the person supervising this run"
            if self.text:
                why += f": {self.text}"
        return f"tether: {why}"


class _Waiting(NamedTuple):
    kind: Literal["approval", "question"]
    future: asyncio.Future[tuple[Decision | None, str, str]]  # decision, text, scope


class Desk:
    """See the module docstring."""

    def __init__(
        self, config: DeskConfig, *, inbox: Path | None, emit: EmitFn | None = None
    ) -> None:
        from tether.inbox.writer import run_id_for_inbox

        self.config = config
        self.inbox = inbox
        self.run = run_id_for_inbox(inbox) if inbox is not None else ""  # keys: RUN:OFFSET
        self._emit = emit
        self._session = Policy()  # what a person answered "always" for
        self._waiting: dict[str, _Waiting] = {}

    @property
    def waiting(self) -> list[str]:
        """The keys that wait for an answer, oldest first."""
        return list(self._waiting)

    # -- approvals --------------------------------------------------------------------

    async def builtin(self, tool: str, arguments: object, cwd: str) -> Verdict | None:
        """The built-in agent's call of ``tool``: the rules decide it when one matches;
        otherwise, under ``approval="ask"``, bash, write and edit wait for a person;
        anything else runs (None), as without a desk."""
        request = Request("builtin", "builtin", tool, arguments, cwd=cwd)
        if self.config.ask and tool in BUILTIN_ASKING:
            return await self.request(request)
        return self.by_rule(request)

    def by_rule(self, request: Request) -> Verdict | None:
        """The decision a rule makes on ``request`` (recorded), or None."""
        call = request.call()
        match = self.config.policy.plus(self._session).evaluate(call)
        if match is None:
            return None
        return self._decided(request, call, Verdict(match.decision, "rule", rule=match.rule.text))

    async def request(self, request: Request) -> Verdict:
        """Decide ``request`` (see the module docstring); waits for a person if needed."""
        ruled = self.by_rule(request)
        if ruled is not None:
            return ruled
        call = request.call()
        if self.config.nobody is not None or self.inbox is None:
            why = self.config.nobody or "this run has no inbox to ask through"
            return self._decided(request, call, Verdict("deny", "no-one", text=why))
        key = self._write_request(request, call)
        if key is None:
            why = "the request could not be written to the run's inbox"
            return self._decided(request, call, Verdict("deny", "no-one", text=why))
        return await self._wait_approval(request, call, key)

    async def _wait_approval(self, request: Request, call: Call, key: str) -> Verdict:
        future = self._register(key, "approval")
        self._show(f"approval {key} waits: {request.agent} {request.tool}: {_short(request)}")
        try:
            got = await self._wait(future, self.config.timeout_s if self.config.default else None)
        except asyncio.CancelledError:
            self._decided(request, call, Verdict("deny", "withdrawn", key, text="the turn ended"))
            raise
        finally:
            self._waiting.pop(key, None)
        if got is None:
            default = self.config.default or "deny"
            return self._decided(request, call, Verdict(default, "timeout", key))
        decision, text, scope = got
        verdict = Verdict(decision or "deny", "person", key, text=text, scope=_scope(scope))
        if verdict.scope == "always":
            self._always(call, verdict.decision)
        return self._decided(request, call, verdict)

    def _always(self, call: Call, decision: Decision) -> None:
        rule = Rule(call.kind.lower(), None, call.kind)
        extra = Policy(approve=(rule,)) if decision == "approve" else Policy(deny=(rule,))
        self._session = self._session.plus(extra)

    def _decided(self, request: Request, call: Call, verdict: Verdict) -> Verdict:
        line: dict[str, Any] = {
            "type": "approval_decision",
            "decision": verdict.decision,
            "by": verdict.by,
            "agent": request.agent,
            "tool": request.tool,
            "kind": call.kind,
            "summary": _short(request),
        }
        for name in ("key", "rule"):
            if getattr(verdict, name) is not None:
                line[name] = getattr(verdict, name)
        if verdict.text:
            line["text"] = verdict.text
        if verdict.scope != "once":
            line["scope"] = verdict.scope
        self._append(line)
        what = verdict.key or f"{request.agent} {request.tool}"
        self._show(
            f"approval {what}: {verdict.note().removeprefix('tether: ')} ({_short(request)})"
        )
        return verdict

    def _write_request(self, request: Request, call: Call) -> str | None:
        line: dict[str, Any] = {
            "type": "approval_request",
            "reason": f"{request.agent} asks to use {request.tool}: {_short(request)}",
            "agent": request.agent,
            "tool": request.tool,
            "kind": call.kind,
            "summary": _short(request),
            "subjects": list(call.subjects),
        }
        line.update(_whole_input(request.arguments))
        if request.choices:
            line["choices"] = list(request.choices)
        if self.config.timeout_s is not None and self.config.default is not None:
            line["timeout_s"] = self.config.timeout_s
            line["default"] = self.config.default
        return self._append(line)

    # -- questions (the built-in ask tool) ----------------------------------------------

    async def question(self, text: str, timeout_s: float) -> tuple[str, str | None]:
        """Ask ``text``; (its key, the answer or None when none came in ``timeout_s``).
        Raises ``OSError`` when the inbox cannot take it, ``LookupError`` when there is
        no one to ask (the message says why)."""
        if self.config.nobody is not None:
            raise LookupError(f"no one to ask: {self.config.nobody}")
        if self.inbox is None:
            raise LookupError("this run has no inbox to ask through")
        from tether.inbox.writer import append_inbox

        offset = append_inbox(self.inbox, {"type": "clarification", "q": text})
        key = f"{self.run}:{offset}"
        future = self._register(key, "question")
        self._show(f"question {key} waits: {' '.join(text.split())[:SUMMARY_CHARS]}")
        try:
            got = await self._wait(future, timeout_s)
        except asyncio.CancelledError:
            self._append({"type": "question_closed", "key": key, "why": "the turn ended"})
            raise
        finally:
            self._waiting.pop(key, None)
        if got is None:
            why = f"no answer within {timeout_s:g} s"
            self._append({"type": "question_closed", "key": key, "why": why})
        return key, None if got is None else got[1]

    # -- answers ------------------------------------------------------------------------

    def check(self, key: str, decision: str | None, text: str | None) -> str | None:
        """Why an answer to ``key`` cannot be taken (None: it can); nothing changes."""
        waiting = self._waiting.get(key)
        if waiting is None or waiting.future.done():
            return f"{NOTHING_WAITS} {key} waits in this run"
        if waiting.kind == "approval" and decision not in ("approve", "deny"):
            return f"{key} is an approval: answer it with a decision, approve or deny"
        if waiting.kind == "question" and not (text or decision):
            return f"{key} is a question: answer it with a text"
        return None

    def resolve(
        self, key: str, decision: str | None, text: str | None, scope: str | None = None
    ) -> bool:
        """Hand the answer to what waits for ``key`` (checked first); True when taken."""
        if self.check(key, decision, text) is not None:
            return False
        waiting = self._waiting[key]
        answer = text or ""
        if waiting.kind == "question" and decision is not None:
            from tether.inbox.answers import decision_text

            answer = decision_text(decision, answer)
        chosen: Decision | None = None
        if decision in ("approve", "deny"):
            chosen = "approve" if decision == "approve" else "deny"
        waiting.future.set_result((chosen, answer, scope or "once"))
        return True

    def resolve_text(self, text: str) -> bool:
        """A steer's or follow-up's text that carries an answer (``[tether answer KEY]
        ...``, from a parent that does not send ``answer``): resolve what waits for it."""
        if not text.startswith(_MARK):
            return False
        key = text[len(_MARK) :].partition("]")[0]
        waiting = self._waiting.get(key)
        if waiting is None:
            return False
        from tether.inbox.answers import find_answer

        answer = find_answer(text, key)
        if answer is None:
            return False
        if waiting.kind == "question":
            return self.resolve(key, None, answer)
        decision = "approve" if answer.startswith("Approved.") else "deny"
        note = answer.removeprefix("Approved.").removeprefix("Denied.").strip()
        return self.resolve(key, decision, note)

    # -- helpers ------------------------------------------------------------------------

    def _register(self, key: str, kind: Literal["approval", "question"]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[key] = _Waiting(kind, future)
        return future

    @staticmethod
    async def _wait(future: asyncio.Future[Any], timeout_s: float | None) -> Any:
        if timeout_s is None or not math.isfinite(timeout_s):
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, timeout_s))
        except TimeoutError:
            return None

    def _append(self, line: Mapping[str, Any]) -> str | None:
        """Append ``line`` to the inbox; its key, or None when it could not be written."""
        if self.inbox is None:
            return None
        from tether.inbox.writer import append_inbox

        try:
            offset = append_inbox(self.inbox, line)
        except (OSError, ValueError):
            return None
        return f"{self.run}:{offset}"

    def _show(self, summary: str) -> None:
        if self._emit is not None:
            with contextlib.suppress(Exception):
                self._emit({"type": "info", "summary": summary})


def _scope(scope: str) -> Literal["once", "always"]:
    return "always" if scope == "always" else "once"


def _short(request: Request) -> str:
    text = request.summary or _subjects(request.call().subjects) or request.tool
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _subjects(subjects: Iterable[str]) -> str:
    return ", ".join(subjects)


_encoder: Final = msgspec.json.Encoder()


def _whole_input(arguments: object) -> dict[str, Any]:
    """The input as the request line keeps it: whole, or cut (and said so) when huge."""
    if arguments is None:
        return {}
    try:
        size = len(_encoder.encode(arguments))
    except (TypeError, ValueError, OverflowError):
        return {"input": repr(arguments)[:SUMMARY_CHARS], "input_truncated": True}
    if size <= MAX_INPUT_BYTES:
        return {"input": arguments}
    text = _encoder.encode(arguments)[:MAX_INPUT_BYTES].decode("utf-8", "ignore")
    return {"input": text, "input_truncated": True}
