"""How a run ended is spelled once: RunStatus is the terminal states of the table."""

from __future__ import annotations

from typing import get_args

from tether.wire.session import TERMINAL, RunStatus


def test_run_status_is_the_terminal_states() -> None:
    assert set(get_args(RunStatus)) == {state.value for state in TERMINAL}
