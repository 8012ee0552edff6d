"""The benches measure tether as it is installed: its modules compiled to bytecode (pip
compiles them on install). A source tree that was never imported, or only with
``PYTHONDONTWRITEBYTECODE=1`` (as this machine's sessions run), has none: every cold
interpreter would compile tether's source before running it, ~40 ms of CPU a child on
the 2-vCPU machine (a cold adapter child's CPU before its CLI's first answer: 140-150 ms
without bytecode, 90 ms with). The bytecode written here is removed when the bench
exits, so the tree is left as it was found (a test or a later run sees no difference)."""

from __future__ import annotations

import atexit
import compileall
import shutil
from pathlib import Path


def compile_tether(*trees: str) -> None:
    """Write the bytecode of the ``tether`` package imported here (and of each source
    tree in ``trees``, e.g. ``--before SRC``) where a cold interpreter looks for it, and
    remove the ``__pycache__`` directories this made when the process exits."""
    import tether

    for root in (Path(tether.__file__).parent, *map(Path, trees)):
        before = set(root.rglob("__pycache__"))
        compileall.compile_dir(str(root), quiet=1)
        made = set(root.rglob("__pycache__")) - before
        atexit.register(_remove, sorted(made))


def _remove(directories: list[Path]) -> None:
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
