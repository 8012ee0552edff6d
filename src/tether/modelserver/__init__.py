"""A scripted model server: the scripted provider's replies served over real provider APIs.

``tether model-server --script FILE`` lets any agent CLI (Claude Code, Codex, Gemini CLI,
pi, ...) run deterministically with no API key: point the CLI's base URL at it and every
model call gets the next reply of the script (the scripted provider's format, see
:mod:`tether.agent.scripted`), streamed in the API the CLI speaks. Each API lives in its
own module (:mod:`tether.modelserver.anthropic`, :mod:`tether.modelserver.gemini`, ...);
:mod:`tether.modelserver.apis` lists them; :mod:`tether.modelserver.core` is the HTTP
server, the script queue and the request log they share.
"""

from __future__ import annotations

from tether.modelserver.apis import APIS, open_model_server
from tether.modelserver.core import ModelServer, Script

__all__ = ["APIS", "ModelServer", "Script", "open_model_server"]
