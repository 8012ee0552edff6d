"""Who may talk to the dashboard: the token, the Host and the Origin, checked per request.

Theory of operation (sans-IO: a request's method, target and headers in, a refusal or
``None`` out):

1. **Host** must be one the server answers to (``127.0.0.1:PORT``, ``localhost:PORT``,
   ``[::1]:PORT``, or the ``--listen`` address). A page on another name that resolves to
   127.0.0.1 (DNS rebinding) sends its own name and is refused: 403.
2. **Origin**, when a browser sends one, must be ``http://`` + an allowed host: a page of
   another site can neither read answers nor open a WebSocket here (a WebSocket is never
   subject to CORS, so this check is what stops cross-site sockets): 403. A browser sends
   ``Sec-Fetch-Site: cross-site`` for such requests too; that is refused as well.
3. **Token**: every request carries the secret printed with the URL, as ``?token=``,
   ``X-Tether-Token`` or ``Authorization: Bearer``; compared in constant time: 401.

The page never needs a cookie (so there is nothing for a cross-site request to ride on).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs

TOKEN_BYTES: Final = 32
TOKEN_HEADER: Final = "x-tether-token"  # noqa: S105 (a header name)


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    reason: str


def allowed_hosts(port: int, listen: str | None = None) -> frozenset[str]:
    """The Host header values the server answers to."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    if listen:
        names.add(f"[{listen}]" if ":" in listen and not listen.startswith("[") else listen)
    return frozenset(f"{name}:{port}" for name in names)


@dataclass(frozen=True, slots=True)
class Policy:
    token: str
    hosts: frozenset[str]

    def check(self, query: str, headers: Mapping[str, str]) -> Refusal | None:
        """``None`` when the request may go on; ``headers`` have lower-case names."""
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return Refusal(403, f"Host {host[:100]!r} is not this dashboard")
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in self.hosts}:
            return Refusal(403, "cross-origin requests are refused")
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            return Refusal(403, "cross-site requests are refused")
        if not self._token_ok(query, headers):
            return Refusal(401, "a valid token is required (the URL the dashboard printed)")
        return None

    def _token_ok(self, query: str, headers: Mapping[str, str]) -> bool:
        offered = [headers.get(TOKEN_HEADER, "")]
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            offered.append(bearer[7:].strip())
        offered += parse_qs(query).get("token", [])[:1]
        expected = self.token.encode()
        return any(hmac.compare_digest(value.encode(), expected) for value in offered if value)


__all__ = ["TOKEN_HEADER", "Policy", "Refusal", "allowed_hosts", "new_token"]
