"""Sans-IO parts of the agent supervisor: which turn answers an ask, the mirror snapshot,
and the registry's added columns."""

from __future__ import annotations

import sqlite3
from itertools import count
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether.daemon.fleet.followers import restore_mirror
from tether.daemon.fleet.registry import AgentRecord, AgentRegistry
from tether.daemon.fleet.turns import MAX_ANSWER_CHARS, AskFailed, TurnAnswer, TurnTracker
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import append_line
from tether.runtime.parent.supervise import RunWatch
from tether.wire import (
    AgentTurnComplete,
    AnyEvent,
    AssistantStreamEnd,
    AssistantText,
    AssistantTextDelta,
    ControlAck,
    Error,
    Exit,
    FollowUpInjected,
    Info,
    LlmStart,
    Ready,
    Result,
    TurnComplete,
    TurnStarted,
    encode,
)
from tether.wire.session import ControlKind, State


class Events:
    """Wire events of run ``r`` with increasing seqs."""

    def __init__(self) -> None:
        self._seq = count(1)

    def __call__(self, cls: type[Any], **fields: Any) -> Any:
        return cls(v=1, seq=next(self._seq), run="r", **fields)

    def call(self, *texts: str, cut: bool = False) -> list[AnyEvent]:
        out = [self(LlmStart)]
        out += [self(AssistantTextDelta, content_index=0, delta=t) for t in texts]
        shown = "".join(texts)[:4] if cut else "".join(texts)
        text = self(AssistantText, final=True, content_index=0, text=shown)
        if cut:
            text = msgspec.structs.replace(text, transport_truncated=True)
        return [*out, text, self(AssistantStreamEnd, final=True)]


def feed(tracker: TurnTracker, events: list[AnyEvent]) -> list[Any]:
    return [outcome for event in events for outcome in tracker.feed(event)]


def test_a_prompt_is_answered_by_the_turn_it_starts() -> None:
    ev, tracker = Events(), TurnTracker()
    tracker.expect(1, opens_turn=True)
    assert feed(tracker, [ev(ControlAck, status="accepted", ref=1), ev(TurnStarted, turn=1)]) == []
    events = ev.call("Let me look.") + ev.call("The answer ", "is 42.")
    usage = {"input": 7, "output": 3}
    done = feed(tracker, [*events, ev(TurnComplete, turn=1, stop_reason="stop", usage=usage)])
    assert done == [TurnAnswer(1, 1, "The answer is 42.", usage, "stop")]
    assert len(tracker) == 0


def test_a_follow_up_is_answered_after_its_injection() -> None:
    ev, tracker = Events(), TurnTracker()
    feed(tracker, [ev(TurnStarted, turn=3), *ev.call("before")])
    tracker.expect(5, opens_turn=False)
    feed(tracker, [ev(ControlAck, status="accepted", ref=5)])
    assert feed(tracker, ev.call("still before")) == []
    feed(tracker, [ev(FollowUpInjected, text="and?", ref=5), *ev.call("after")])
    done = feed(tracker, [ev(TurnComplete, turn=3, stop_reason="stop")])
    assert done == [TurnAnswer(5, 3, "after", {}, "stop")]


def test_a_follow_up_read_by_the_next_turn_waits_for_that_turn() -> None:
    ev, tracker = Events(), TurnTracker()
    feed(tracker, [ev(TurnStarted, turn=1)])
    tracker.expect(2, opens_turn=False)
    feed(tracker, [ev(ControlAck, status="accepted", ref=2), *ev.call("first")])
    assert feed(tracker, [ev(TurnComplete, turn=1, stop_reason="stop")]) == []
    feed(tracker, [ev(TurnStarted, turn=2), ev(FollowUpInjected, text="q", ref=2)])
    feed(tracker, ev.call("second"))
    [answer] = feed(tracker, [ev(TurnComplete, turn=2, stop_reason="stop")])
    assert (answer.turn, answer.text) == (2, "second")


def test_a_failed_turn_answers_with_its_error() -> None:
    """The error the turn's agent gave reaches the ask (``tether agent ask`` prints it and
    exits 4); a turn that ends well after a failed one carries none."""
    ev, tracker = Events(), TurnTracker()
    tracker.expect(1, opens_turn=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=1), ev(TurnStarted, turn=1)])
    failed = ev(AgentTurnComplete, status="error", error="Not logged in · Please run /login")
    done = feed(tracker, [failed, ev(TurnComplete, turn=1, stop_reason="error")])
    assert done == [TurnAnswer(1, 1, "", {}, "error", error="Not logged in · Please run /login")]
    tracker.expect(2, opens_turn=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=2), ev(TurnStarted, turn=2)])
    feed(tracker, [ev(Error, error="x" * 10_000), *ev.call("partial")])
    [cut] = feed(tracker, [ev(TurnComplete, turn=2, stop_reason="error")])
    assert cut.error == "x" * 4096
    tracker.expect(3, opens_turn=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=3), ev(TurnStarted, turn=3)])
    [fine] = feed(tracker, [*ev.call("ok"), ev(TurnComplete, turn=3, stop_reason="stop")])
    assert fine.error is None


def test_refused_dropped_and_ended_asks_fail_with_a_reason() -> None:
    ev, tracker = Events(), TurnTracker()
    for seq in (1, 2, 3):
        tracker.expect(seq, opens_turn=seq == 1)
    [refused] = feed(tracker, [ev(ControlAck, status="rejected", ref=1, reason="busy")])
    assert refused == AskFailed(1, "busy", rejected=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=2)])
    [dropped] = feed(tracker, [ev(Info, refs=[2], summary="dropped")])
    assert isinstance(dropped, AskFailed)
    assert "dropped" in dropped.reason
    [ended] = feed(tracker, [ev(Exit, status="cancelled")])
    assert ended == AskFailed(3, "the run ended (cancelled) before answering")


def test_cut_text_is_rebuilt_from_deltas_and_bounded() -> None:
    ev, tracker = Events(), TurnTracker()
    tracker.expect(1, opens_turn=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=1), ev(TurnStarted, turn=1)])
    feed(tracker, ev.call("a long ", "answer", cut=True))
    [answer] = feed(tracker, [ev(TurnComplete, turn=1, stop_reason="length")])
    assert (answer.text, answer.truncated) == ("a long answer", False)
    tracker.expect(2, opens_turn=True)
    feed(tracker, [ev(ControlAck, status="accepted", ref=2), ev(TurnStarted, turn=2)])
    feed(tracker, ev.call(*["x" * 65536] * (MAX_ANSWER_CHARS // 65536 + 2)))
    [big] = feed(tracker, [ev(TurnComplete, turn=2, stop_reason="stop")])
    assert big.truncated
    assert len(big.text) == MAX_ANSWER_CHARS


def test_snapshot_and_restore_resume_the_mirror(tmp_path: Path) -> None:
    control = tmp_path / "control.jsonl"
    control.touch()
    mirror, ev = RunMirror("r"), Events()
    prompt = mirror.control(ControlKind.PROMPT, text="go")
    assert isinstance(prompt, tuple)
    append_line(control, prompt[1])
    for event in [ev(Ready), ev(ControlAck, status="accepted", ref=1), ev(TurnStarted, turn=1)]:
        _, problem = mirror.receive(encode(event))  # type: ignore[arg-type]
        assert problem is None
    steer = mirror.control(ControlKind.STEER, text="faster")
    assert isinstance(steer, tuple)
    append_line(control, steer[1])
    snap = mirror.snapshot()
    late = mirror.control(ControlKind.FOLLOW_UP, text="written after the snapshot")
    assert isinstance(late, tuple)
    append_line(control, late[1])

    restored = restore_mirror("r", snap, mirror.receiver.seq, control)
    assert (restored.state, restored.turn) == (State.RUNNING, 1)
    assert {s: p.kind for s, p in restored.pending.items()} == {
        2: ControlKind.STEER,
        3: ControlKind.FOLLOW_UP,
    }
    assert restored.sender.seq == 3  # the next control is seq 4, never a reused one
    ack = ev(ControlAck, status="accepted", ref=3)
    assert restored.receive(encode(ack))[1] is None  # type: ignore[arg-type]
    replayed = restore_mirror("r", None, 0, control)
    assert sorted(replayed.pending) == [1, 2, 3]


@pytest.mark.parametrize("killed_after", ["result", "exit"])
def test_a_snapshot_keeps_the_result_and_exit_it_was_taken_after(
    tmp_path: Path, killed_after: str
) -> None:
    """A daemon killed while an agent was being stopped, after it saved a snapshot past the
    run's ``result`` (or ``exit``): the next daemon resumes reading after it, so without
    them in the snapshot it failed a run that ended done ("exited done without a result",
    found by bench/fleet_outside.py's restart-mid-stop)."""
    control = tmp_path / "control.jsonl"
    control.touch()
    mirror, ev = RunMirror("r"), Events()
    close = mirror.control(ControlKind.CLOSE)
    assert isinstance(close, tuple)
    append_line(control, close[1])
    events = [ev(Ready), ev(ControlAck, status="accepted", ref=1)]
    events += [ev(Result, stop_reason="stop", final_text="bye"), ev(Exit, status="done")]
    cut = 3 if killed_after == "result" else 4
    for event in events[:cut]:
        assert mirror.receive(encode(event))[1] is None  # type: ignore[arg-type]
    stored = msgspec.json.decode(msgspec.json.encode(mirror.snapshot()))  # (a JSON column)
    restored = restore_mirror("r", stored, mirror.receiver.seq, control)
    for event in events[cut:]:
        assert restored.receive(encode(event))[1] is None  # type: ignore[arg-type]
    verdict = RunWatch(restored, Timeouts(), now=0.0).verdict()
    assert (verdict.status, verdict.error) == ("done", None)
    assert verdict.result == events[2]


def test_registry_adds_its_new_columns_to_an_old_database(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE daemon_agents (name TEXT PRIMARY KEY, run_dir TEXT NOT NULL, pid INTEGER,"
        " pid_start_time INTEGER, state TEXT NOT NULL, task TEXT, provider TEXT, model TEXT,"
        " cwd TEXT, argv TEXT, channel_id TEXT, deadline_at REAL, exit_code INTEGER,"
        " detail TEXT, last_seq INTEGER NOT NULL DEFAULT 0,"
        " event_offset INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,"
        " updated_at REAL NOT NULL)"
    )
    db.execute(
        "INSERT INTO daemon_agents (name, run_dir, state, argv, created_at, updated_at)"
        " VALUES ('old', '/runs/old', 'ready', '[\"tether\"]', 1, 1)"
    )
    db.commit()
    db.close()
    with AgentRegistry.open(path) as registry:
        old = registry.require("old")
        assert (old.argv, old.turn, old.usage, old.snapshot) == (["tether"], 0, None, None)
        registry.update("old", turn=2, usage={"input": 1}, snapshot={"state": "ready"})
        new = registry.require("old")
        assert (new.turn, new.usage, new.snapshot) == (2, {"input": 1}, {"state": "ready"})
        registry.insert(AgentRecord(name="n", run_dir="/r", state="starting", started_at=5.0))
        assert registry.require("n").started_at == 5.0
