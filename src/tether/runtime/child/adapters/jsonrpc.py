"""JSON-RPC 2.0 messages as the Codex app-server and ACP agents send them, sans-IO.

:func:`classify` sorts one decoded JSON object into a :class:`Request` (``id`` and
``method``: the agent asks the client something), a :class:`Response` (``id`` and
``result`` or ``error``: the answer to one of ours) or a :class:`Notification`
(``method`` only), or None for anything else. Codex leaves out the ``"jsonrpc": "2.0"``
member; ACP sends it; both are accepted. :class:`Outbox` numbers our requests and
remembers which method each id was for, so a response can be matched to its request.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

__all__ = [
    "METHOD_NOT_FOUND",
    "Notification",
    "Outbox",
    "Request",
    "Response",
    "classify",
    "error_message",
]

METHOD_NOT_FOUND: Final = -32601


class Request(NamedTuple):
    id: int | str
    method: str
    params: dict[str, Any]


class Response(NamedTuple):
    id: int | str
    result: Any
    error: dict[str, Any] | None


class Notification(NamedTuple):
    method: str
    params: dict[str, Any]


def _ident(value: object) -> int | str | None:
    if isinstance(value, bool):
        return None
    return value if isinstance(value, int | str) else None


def classify(message: object) -> Request | Response | Notification | None:
    """What one JSON object is (see the module docstring); None when it is none of them."""
    if not isinstance(message, dict):
        return None
    method = message.get("method")
    ident = _ident(message.get("id"))
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if isinstance(method, str):
        return Request(ident, method, params) if ident is not None else Notification(method, params)
    if ident is None or ("result" not in message and "error" not in message):
        return None
    error = message.get("error")
    if error is not None and not isinstance(error, dict):
        error = {"message": str(error)[:200]}
    return Response(ident, message.get("result"), error)


def error_message(error: dict[str, Any] | None) -> str:
    """A response error's message (its code when it has none)."""
    if not error:
        return ""
    message = error.get("message")
    text = message if isinstance(message, str) and message else f"error {error.get('code', '?')}"
    data = error.get("data")
    details = data.get("details") if isinstance(data, dict) else None
    return f"{text} ({details})" if isinstance(details, str) and details else text


class Outbox:
    """Our requests, numbered; ``jsonrpc`` adds the 2.0 marker (ACP wants it)."""

    def __init__(self, *, jsonrpc: bool) -> None:
        self._jsonrpc = jsonrpc
        self._next = 0
        self.pending: dict[int | str, str] = {}

    def _base(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0"} if self._jsonrpc else {}

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        self.pending[self._next] = method
        return {**self._base(), "id": self._next, "method": method, "params": params}

    def notify(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message = {**self._base(), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def answer(self, ident: int | str, result: Any) -> dict[str, Any]:
        return {**self._base(), "id": ident, "result": result}

    def refuse(self, ident: int | str, code: int, message: str) -> dict[str, Any]:
        return {**self._base(), "id": ident, "error": {"code": code, "message": message}}

    def settle(self, response: Response) -> str | None:
        """The method a response answers (None when it answers nothing we sent)."""
        return self.pending.pop(response.id, None)
