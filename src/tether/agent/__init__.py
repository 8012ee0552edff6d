"""The built-in agent: conversation history, streaming model calls, tool execution.

:mod:`tether.agent.provider` is the model interface, :mod:`tether.agent.loop` the agent
loop, :mod:`tether.agent.tools` the tools, :mod:`tether.agent.registry` providers by
name. Nothing is imported here, so importing one of them stays cheap.
"""

from __future__ import annotations
