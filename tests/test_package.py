"""`import tether` stays light, and its lazy names are exactly the parent API it promises."""

from __future__ import annotations

import subprocess
import sys

import tether
import tether.api


def test_lazy_names_come_from_the_api_module() -> None:
    lazy = set(tether.__all__) - {"__version__"}
    assert lazy <= set(tether.api.__all__)
    for name in lazy:
        assert getattr(tether, name) is getattr(tether.api, name)


def test_import_tether_loads_no_runtime() -> None:
    code = "import sys, tether; print(sorted(m for m in sys.modules if m.startswith('tether')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tether']"


def test_a_local_spawn_does_not_load_the_remote_side() -> None:
    """``tether.spawn`` (the API module) leaves NATS's side unloaded until it is named."""
    code = (
        "import sys, tether; tether.spawn; print('tether.daemon.hosts.remote_run' in sys.modules); "
        "tether.spawn_remote; print('tether.daemon.hosts.remote_run' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
