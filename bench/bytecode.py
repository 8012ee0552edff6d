"""The benches measure tether as it is installed: its modules compiled to bytecode (pip
compiles them on install). A source tree that was never imported, or only with
``PYTHONDONTWRITEBYTECODE=1``, has none: every cold interpreter would compile tether's
source before running it, ~40 ms of CPU a child on the 2-vCPU machine (a cold adapter
child's CPU before its CLI's first answer: 140-150 ms without bytecode, 90 ms with)."""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_tether(*trees: str) -> None:
    """Write the bytecode of the ``tether`` package imported here (and of each source
    tree in ``trees``, e.g. ``--before SRC``) where a cold interpreter looks for it."""
    import tether

    for root in (str(Path(tether.__file__).parent), *trees):
        compileall.compile_dir(root, quiet=1)
