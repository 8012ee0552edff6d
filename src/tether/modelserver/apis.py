"""The APIs the model server speaks, in the order requests are matched against them, and
:func:`open_model_server`, a server speaking all of them (core never imports this module:
it is handed its APIs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from tether.modelserver import anthropic, gemini, openai_chat, openai_responses
from tether.modelserver.core import Api, ModelServer, Script

APIS: Final[tuple[Api, ...]] = (
    anthropic.API,
    gemini.API,
    openai_chat.API,
    openai_responses.API,
)


@contextlib.contextmanager
def open_model_server(
    script: str | Path | list[Any], *, log: str | Path | None = None, port: int = 0
) -> Iterator[ModelServer]:
    """A model server for ``script`` running in a thread for the ``with`` block."""
    server = ModelServer(Script.load(script), log=log, port=port, apis=APIS).start()
    try:
        yield server
    finally:
        server.close()
