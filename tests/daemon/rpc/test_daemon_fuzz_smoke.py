"""The fuzz harness imports and runs a bounded random loop."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[3] / "fuzz" / "fuzz_daemon_frames.py"


def test_fuzz_harness_runs() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_daemon_frames", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_daemon_frames", module)
    spec.loader.exec_module(module)
    module.run_random(2000, seed=1)
    module.test_one_input(b"\x00\xff\xff\xff\xff")
