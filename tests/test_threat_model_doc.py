"""docs/threat-model.md names real tests: every ``tests/...py::name`` it cites exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "threat-model.md"
CITED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")


def test_every_cited_test_exists() -> None:
    cited = CITED.findall(DOC.read_text())
    assert len(cited) > 40
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.exists():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
