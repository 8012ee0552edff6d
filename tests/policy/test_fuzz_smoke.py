"""The policy fuzz harness imports and runs a bounded random loop clean."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_policy.py"


def test_fuzz_policy_harness_runs_clean() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_policy", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.random_loop(3000, seed=1) == 3000
