"""No test decides by sleeping: every wait in tests/ goes through tests/support/waits.py.

A test waits for an event (a file's change, a process's exit, a line, an ack); the one
timed pause (the poll of a state no event marks) is written once, there. This reads every
test module's syntax tree and fails on a sleep call anywhere else: ``time.sleep``,
``asyncio.sleep`` (``sleep(0)`` included: ``waits.loop_pass`` says what it waits for),
``trio``/``anyio`` sleeps, a bare ``sleep`` imported from them, and a thread event waited on
with a number (a thread Event's ``wait`` given seconds). A shell ``sleep`` inside a test
double's command is a string, not counted (a tool that runs until the test says so is a
gate: tests/support/gates.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
THE_ONE_POLL = TESTS / "support" / "waits.py"
SLEEPERS = {"time", "asyncio", "trio", "anyio"}


def _sleeps(tree: ast.AST) -> list[int]:
    """Line numbers of sleep calls in ``tree``."""
    bare = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in SLEEPERS
        for alias in node.names
        if alias.name == "sleep"
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in bare:
            found.append(node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr == "sleep":
            if isinstance(func.value, ast.Name) and func.value.id in SLEEPERS:
                found.append(node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr == "wait" and node.args:
            owner = func.value  # an Event waited on for a number of seconds: a sleep
            if isinstance(owner, ast.Call) and ast.unparse(owner.func).endswith("Event"):
                found.append(node.lineno)
    return found


def test_no_test_sleeps() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == THE_ONE_POLL:
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(TESTS.parent)}:{line}" for line in _sleeps(tree)]
    assert found == [], "wait on an event (tests/support/waits.py), not a sleep: " + ", ".join(
        found
    )


def test_the_check_finds_each_kind_of_sleep() -> None:
    nap = "sleep"  # spelt apart: a line-counting search of tests/ finds no sleep call here
    source = (
        "import time, asyncio, threading\n"
        f"from trio import {nap} as nap\n"
        f"time.{nap}(1)\n"
        "async def f():\n"
        f"    await asyncio.{nap}(0)\n"
        "nap(2)\n"
        "threading.Event().wait"
        "(0.01)\n"
        f"print('{nap} 1')\n"
        "threading.Event().wait()\n"
    )
    assert sorted(_sleeps(ast.parse(source))) == [3, 5, 6, 7]
