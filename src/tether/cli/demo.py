"""``tether demo``: the whole protocol in about ten seconds, with no API key.

Three children run at once on scripted replies (``examples/demo/*.json``), making real
tool calls in a private scratch directory:

- ``steered``: steered mid-turn (after its first tool call) to also count lines;
- ``deadline``: a 30 s "build" under a deadline; the parent sends ``finalize`` before
  the deadline, so its last, tool-free turn still answers;
- ``cancelled``: counting to ten, cancelled after a couple of numbers.

``tether demo --agent claude`` runs the same three on a real agent CLI against scripted
model servers (see :mod:`tether.cli.demo_agents`).

Everything goes through the same parent and display as ``tether run``; the runs are
recorded (``tether runs``, ``tether replay RUN``). Exit status 0 when each run ended
as the demo meant it to (done, done, cancelled).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tether import exits

SCENARIOS: Final = ("steered", "deadline", "cancelled")
EXPECTED: Final = {"steered": "done", "deadline": "done", "cancelled": "cancelled"}
TASKS: Final = {
    "steered": "Take notes in the scratch directory and tell me what is there.",
    "deadline": "Build the project and report.",
    "cancelled": "Count to ten slowly.",
}
STEER_TEXT: Final = "Also count the lines in each notes file."
DEADLINE_S: Final = 10.0
FINALIZE_AFTER_S: Final = 5.0
CANCEL_AFTER_TOOL_S: Final = 2.5


def main(argv: list[str], prog: str = "tether demo") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Three scripted children at once: steered, finalized by its deadline, "
        "cancelled. No API key needed.",
    )
    parser.add_argument("--output", choices=("human", "stream-json", "wire"), default="human")
    parser.add_argument("--examples", help="the examples directory (default: found nearby)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--agent", default="builtin", help="run the demo on an agent CLI (e.g. claude)"
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else 2
    if args.agent != "builtin":
        from tether.cli.demo_agents import CLIS

        if args.agent not in CLIS:
            known = ", ".join(CLIS)
            print(
                f"{prog}: no demo for --agent {args.agent} (there is one for: {known})",
                file=sys.stderr,
            )
            return 2
        return asyncio.run(_demo({}, args.output, keep=args.keep, agent=args.agent))
    scenarios = find_scenarios(args.examples)
    if scenarios is None:
        print(
            "tether demo: cannot find examples/demo/*.json; run it from a tether checkout "
            "or pass --examples DIR",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(_demo(scenarios, args.output, keep=args.keep))


def find_scenarios(given: str | None) -> dict[str, Path] | None:
    """The scenario files, from --examples, $TETHER_EXAMPLES, the checkout, or ./examples."""
    import tether

    candidates = [given, os.environ.get("TETHER_EXAMPLES")]
    package = Path(tether.__file__).resolve().parent
    candidates += [str(package / "examples"), str(package.parents[1] / "examples"), "examples"]
    for candidate in candidates:
        if not candidate:
            continue
        folder = Path(candidate) / "demo"
        files = {name: folder / f"{name}.json" for name in SCENARIOS}
        if all(path.is_file() for path in files.values()):
            return {name: path.resolve() for name, path in files.items()}
    return None


@dataclass
class _Child:
    name: str
    handle: Any
    tool_called: asyncio.Event


async def _demo(
    scenarios: dict[str, Path], output: str, *, keep: bool, agent: str = "builtin"
) -> int:
    from tether.cli.run import DisplayFeed
    from tether.display import open_display

    display = open_display(output, stdout=sys.stdout, stderr=sys.stderr)
    presenter = DisplayFeed(display)
    scratch = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    ok = False
    try:
        with contextlib.ExitStack() as stack:
            children = await _start(scenarios, scratch, agent, stack)
            ok = await _show(children, scratch, display, presenter)
    finally:
        display.close()
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return exits.OK if ok else exits.FAILED


async def _show(children: list[_Child], scratch: Path, display: Any, presenter: Any) -> bool:
    """Show the runs live, steer and cancel them as planned; True when each ended as meant."""
    for child in children:
        display.notice(f"{child.name}: run {child.handle.run_id} in {scratch / child.name}")
    feeds = [asyncio.create_task(_feed(c, presenter)) for c in children]
    directors = [asyncio.create_task(_direct(c, display)) for c in children]
    results = [await c.handle.wait() for c in children]
    await asyncio.gather(*feeds)
    for director in directors:
        director.cancel()
    ok = True
    for child, result in zip(children, results, strict=True):
        display.notice(f"{child.name}: {result.status} (expected {EXPECTED[child.name]})")
        presenter.end(
            status=result.status,
            final_text=result.final_text,
            usage=result.usage,
            truncated=result.truncated,
            elapsed_s=result.elapsed_s,
            error=result.error,
        )
        ok = ok and result.status == EXPECTED[child.name]
    display.notice("replay any of them with `tether replay RUN`; list them with `tether runs`")
    return ok


async def _start(
    scenarios: dict[str, Path], scratch: Path, agent: str, stack: contextlib.ExitStack
) -> list[_Child]:
    from tether.runtime.parent.spawn import spawn

    servers: dict[str, Any] = {}
    if agent != "builtin":
        from tether.cli.demo_agents import CLIS, open_servers, spawn_options

        servers = stack.enter_context(open_servers(CLIS[agent], SCENARIOS))

    async def one(name: str) -> _Child:
        workdir = scratch / name
        workdir.mkdir(mode=0o700)
        options: dict[str, Any] = {}
        if agent != "builtin":
            options = spawn_options(agent, CLIS[agent], servers[name], workdir, name)
        else:
            options = {"provider": "scripted", "child_args": ["--script", str(scenarios[name])]}
            if name == "deadline":
                options |= {"deadline_s": DEADLINE_S, "finalize_after_s": FINALIZE_AFTER_S}
        handle = await spawn(TASKS[name], cwd=workdir, **options)
        return _Child(name, handle, asyncio.Event())

    return list(await asyncio.gather(*(one(name) for name in SCENARIOS)))


async def _feed(child: _Child, presenter: Any) -> None:
    from tether.runtime.parent.spawn import RunEvent
    from tether.wire import ToolCall

    async for update in child.handle.updates():
        presenter.update(update)
        if isinstance(update, RunEvent) and isinstance(update.event, ToolCall):
            child.tool_called.set()


async def _direct(child: _Child, display: Any) -> None:
    """What the demo does to each run: steer one, cancel one (the deadline does the rest)."""
    from tether.runtime.parent.spawn import ParentError

    if child.name not in ("steered", "cancelled"):
        return
    await child.tool_called.wait()
    try:
        if child.name == "steered":
            ack = await child.handle.steer(STEER_TEXT)
            display.notice(f"steered: sent steer {STEER_TEXT!r}: {ack.status}")
        else:
            await asyncio.sleep(CANCEL_AFTER_TOOL_S)
            ack = await child.handle.cancel()
            display.notice(f"cancelled: sent cancel: {ack.status if ack else 'no ack'}")
    except ParentError as exc:
        display.notice(f"{child.name}: {exc}", level="warning")
