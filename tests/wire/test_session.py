from __future__ import annotations

from itertools import product
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.wire import session
from tether.wire.session import (
    ACTIVE,
    ADVANCES,
    CHECKED,
    DECISIONS,
    EXTENSIONS,
    TERMINAL,
    V1_CONTROLS,
    AckStatus,
    ControlKind,
    Effect,
    Internal,
    State,
    acks_of,
    advance,
    decide,
    decide_for_run,
    is_terminal,
)
from tether.wire.table import render_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "state-table.md"


def test_tables_are_the_full_product() -> None:
    assert set(DECISIONS) == set(product(State, ControlKind))
    assert set(ADVANCES) == set(product(State, Internal))


def test_reference_rows() -> None:
    assert decide("starting", "prompt").reason == "child is not ready"
    assert decide("starting", "cancel").next_state is State.CANCELLED
    assert decide("running", "prompt").reason == "a turn is running; send steer or follow-up"
    assert decide("closing", "steer").reason == "run is closing"
    assert decide("finalizing", "follow-up").reason == "run is finalizing"
    assert decide("done", "cancel").reason == "run is done"
    assert decide("ready", "close") == decide(State.READY, ControlKind.CLOSE)
    assert decide("ready", "close").effect is Effect.FINISH
    assert decide("closing", "close").ack is AckStatus.APPLIED
    assert decide("finalizing", "finalize").ack is AckStatus.APPLIED
    assert decide("finalizing", "close").ack is AckStatus.APPLIED
    assert decide("running", "finalize").effect is Effect.INTERRUPT_TURN
    for state in ("ready", "running"):
        for control in ("steer", "follow-up"):
            assert decide(state, control).ack is AckStatus.ACCEPTED


def test_foreign_run_is_rejected_before_the_table() -> None:
    decision = decide_for_run("ready", "prompt", "x", "y")
    assert decision.ack is AckStatus.REJECTED
    assert decision.reason == "run x is not y"
    assert decision.next_state is State.READY
    assert decide_for_run("ready", "prompt", "y", "y").ack is AckStatus.ACCEPTED


@given(st.lists(st.tuples(st.sampled_from(list(State)), st.text(max_size=8)), max_size=200))
def test_foreign_rejections_are_kept_few_and_always_the_same(
    calls: list[tuple[State, str]],
) -> None:
    """The rejections of controls for other runs are remembered (a Decision is costly to
    build on the ack path), at most FOREIGN_KEPT of them, and each equals a fresh one."""
    for state, run in calls:
        decision = decide_for_run(state, "steer", run + "!", "own")
        assert decision == session._reject(state, f"run {run}! is not own")
        assert len(session._FOREIGN) <= session.FOREIGN_KEPT


def test_unknown_names_are_rejected_not_raised() -> None:
    assert decide("nowhere", "prompt").ack is AckStatus.REJECTED
    assert decide("ready", "pause").ack is AckStatus.REJECTED
    assert advance("ready", "explode").effect is Effect.IMPOSSIBLE


def test_internal_events() -> None:
    assert advance("starting", "started").next_state is State.READY
    assert advance("running", "turn-done").next_state is State.READY
    assert advance("closing", "turn-done").effect is Effect.FINISH
    assert advance("finalizing", "turn-done").effect is Effect.START_FINALIZE_TURN
    assert advance("finalizing", "final-turn-done").next_state is State.DONE
    for state in ("starting", "ready", "running", "closing", "finalizing"):
        assert advance(state, "deadline").next_state is State.TIMED_OUT
        assert advance(state, "fatal").next_state is State.FAILED
    assert advance("ready", "turn-done").effect is Effect.IMPOSSIBLE


@given(st.sampled_from(list(State)), st.sampled_from(list(ControlKind)))
def test_every_pair_is_answered_consistently(state: State, control: ControlKind) -> None:
    decision = decide(state, control)
    if decision.ack is not AckStatus.ACCEPTED:
        assert decision.next_state is state
        assert decision.effect is Effect.NONE or decision.effect in CHECKED
    if decision.effect in CHECKED:
        assert control in EXTENSIONS
        assert acks_of(decision) == {AckStatus.APPLIED, AckStatus.REJECTED}
    else:
        assert acks_of(decision) == {decision.ack}
    if decision.ack is AckStatus.REJECTED:
        assert decision.reason
    if is_terminal(state):
        assert decision.ack is AckStatus.REJECTED
        assert decision.reason == f"run is {state}"


@given(st.lists(st.one_of(st.sampled_from(list(ControlKind)), st.sampled_from(list(Internal)))))
def test_terminal_states_absorb_everything(steps: list[ControlKind | Internal]) -> None:
    state = State.STARTING
    for step in steps:
        before = state
        if isinstance(step, ControlKind):
            state = decide(state, step).next_state
        else:
            move = advance(state, step)
            if move.effect is not Effect.IMPOSSIBLE:
                state = move.next_state
        if before in TERMINAL:
            assert state is before


def test_docs_table_is_generated_from_the_data() -> None:
    assert DOCS.read_text(encoding="utf-8") == render_markdown(), (
        "docs/state-table.md is stale: run `tether wire table > docs/state-table.md`"
    )


def test_v1_and_its_extensions_are_every_control() -> None:
    assert set(V1_CONTROLS) | set(EXTENSIONS) == set(ControlKind)
    assert not set(V1_CONTROLS) & set(EXTENSIONS)


def test_extensions_never_move_the_run_and_are_checked_where_something_can_wait() -> None:
    for state in State:
        for control in EXTENSIONS:
            decision = decide(state, control)
            assert decision.next_state is state
            if state in TERMINAL:
                assert decision.reason == f"run is {state}"
            elif state is State.STARTING:
                assert decision.reason == "child is not ready"
            else:
                assert state in ACTIVE
                assert decision.ack is AckStatus.APPLIED
                expected = {
                    ControlKind.ANSWER: Effect.RESOLVE_ANSWER,
                    ControlKind.UNQUEUE: Effect.WITHDRAW_QUEUED,
                }
                assert decision.effect is expected[control]
