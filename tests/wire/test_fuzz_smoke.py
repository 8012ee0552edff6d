from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_wire.py"


def test_fuzz_harness_runs_clean() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_wire", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.random_loop(3000, seed=1) == 3000
