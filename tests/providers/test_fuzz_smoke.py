"""A quick run of fuzz/fuzz_sse.py's random loop, so the fuzz target itself stays working."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

FUZZ = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_sse.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_sse", FUZZ)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzz_sse_random_loop() -> None:
    fuzz = load()
    assert fuzz.run_random(3000, seed=20240611) == 3000


def test_fuzz_sse_edge_inputs() -> None:
    fuzz = load()
    for data in (b"", b"\r", b"\xef\xbb", b"data: [DONE]\n\n", b"event: error\ndata: {}\n\n"):
        fuzz.one_input(data)
