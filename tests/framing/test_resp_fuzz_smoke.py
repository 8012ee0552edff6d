"""A quick run of fuzz/fuzz_resp.py's random loop, so the fuzz target itself stays working."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_resp.py"


def test_fuzz_harness_runs_clean() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_resp", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.random_loop(3000, seed=1) == 3000
