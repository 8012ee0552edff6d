"""Every cross-reference in ``src/tether``'s docstrings names something that exists: a
``:class:`` / ``:func:`` / ``:meth:`` / ``:mod:`` / ``:attr:`` / ``:data:`` / ``:exc:``
role naming ``tether.X.Y`` resolves by import and attribute (a class's annotated or Struct
field counts). A renamed or moved part leaves no docstring pointing at what is gone."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src" / "tether"
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc):`~?(tether(?:\.\w+)+)`")


def _references() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for match in ROLE.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(SRC)), match.group(1)))
    return found


def _resolves(reference: str) -> bool:
    parts = reference.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            if hasattr(target, name):
                target = getattr(target, name)
                continue
            fields = (
                *getattr(target, "__annotations__", {}),
                *getattr(target, "__struct_fields__", ()),
            )
            return isinstance(target, type) and name in fields
        return True
    return False


def test_every_docstring_reference_resolves() -> None:
    references = _references()
    assert len(references) > 100  # the pattern still finds them
    broken = [f"{where} names {ref}" for where, ref in references if not _resolves(ref)]
    assert broken == []
