"""Providers by name: ``get_provider("scripted", None, script="replies.json")``.

``scripted`` lives here; the HTTP and command providers live in
:mod:`tether.agent.providers` and are imported only when asked for, so ``tether
child`` starts fast. Those classes are built as ``Cls(model=model, env=env,
options=options)``; ``options`` comes from repeated ``--provider-option key=value``.

Constructors may run in a worker thread (the child builds its agent off the event
loop, after ``ready``): they must not need a running event loop.

Errors: an unknown name, a provider module that is missing, or a provider that
refuses its configuration all raise :class:`ProviderSetupError` with a message a
user can act on.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tether.errors import AgentError

if TYPE_CHECKING:
    from tether.agent.provider import Provider

__all__ = ["PROVIDERS", "ProviderSetupError", "get_provider"]

# name -> "module:Class" (imported lazily)
PROVIDERS: Final[dict[str, str]] = {
    "scripted": "tether.agent.scripted:ScriptedProvider",
    "anthropic": "tether.agent.providers.anthropic:AnthropicProvider",
    "openai": "tether.agent.providers.openai:OpenAIProvider",
    "command": "tether.agent.providers.command:CommandProvider",
}


class ProviderSetupError(AgentError, ValueError):
    """The provider cannot be built: unknown name, missing module, bad configuration."""


def check_provider(name: str) -> None:
    """Raise :class:`ProviderSetupError` for an unknown name (imports nothing)."""
    if name not in PROVIDERS:
        raise ProviderSetupError(f"unknown provider {name!r} (known: {', '.join(PROVIDERS)})")


def get_provider(
    name: str,
    model: str | None,
    *,
    script: str | None = None,
    env: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> Provider:
    """Build the provider ``name`` for ``model``; raises :class:`ProviderSetupError`."""
    check_provider(name)
    cls = _load(name, PROVIDERS[name])
    kwargs: dict[str, Any] = {"model": model, "env": env, "options": dict(options or {})}
    if name == "scripted":
        kwargs["script"] = script
    try:
        provider: Provider = cls(**kwargs)
    except ProviderSetupError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ProviderSetupError(f"provider {name}: {exc}") from exc
    return provider


def _load(name: str, target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ProviderSetupError(
                f"provider {name!r} is not available in this build ({module_name} is missing)"
            ) from exc
        raise ProviderSetupError(f"provider {name!r} needs a missing module: {exc.name}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ProviderSetupError(f"provider {name!r}: {target} does not exist") from None
