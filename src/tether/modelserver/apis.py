"""The APIs the model server speaks, in the order requests are matched against them."""

from __future__ import annotations

from typing import Final

from tether.modelserver import anthropic, gemini
from tether.modelserver.core import Api

APIS: Final[tuple[Api, ...]] = (anthropic.API, gemini.API)
