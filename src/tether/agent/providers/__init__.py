"""Model providers for the built-in agent, and the parts they share.

The registry imports ``tether.agent.providers.<name>`` lazily; this package module stays
import-light (stdlib and :mod:`tether.agent.provider` only; httpx and msgspec are imported
inside the functions that need them).

- ``anthropic``: :class:`~tether.agent.providers.anthropic.AnthropicProvider`
- ``openai``: :class:`~tether.agent.providers.openai.OpenAIProvider`
- ``command``: :class:`~tether.agent.providers.command.CommandProvider`

Errors (every failure a provider reports is a :class:`ProviderError`)::

    ProviderError                   tether.agent.provider: message + retryable
    └── ProviderHTTPError           an HTTP status from the API: + status, retry_after

A tool call whose arguments are not a JSON object arrives as :class:`InvalidToolUse`, a
:class:`ToolUse` with ``arguments == {}`` plus the raw text and the parse error. The loop
should not run the tool; it should answer the call with an ``is_error`` ToolOutcome
quoting :attr:`InvalidToolUse.error`, so the model can correct itself. A loop that does not
know the subclass still sees a ToolUse with empty arguments, which the tool's own argument
validation rejects.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from tether.agent.provider import ProviderError, StreamEvent, ToolUse

if TYPE_CHECKING:
    import httpx

    from tether.agent.providers.sse import SSEDecoder, SSEEvent


# An error body is read up to this many bytes; its message is cut to ERROR_TEXT_CHARS.
ERROR_BODY_BYTES: Final = 64 * 1024
ERROR_TEXT_CHARS: Final = 500
# One response may accumulate at most this many characters (text, thinking, tool JSON).
MAX_RESPONSE_CHARS: Final = 32 * 1024 * 1024
# Retry waits: exponential from the base, never longer than this; a longer Retry-After fails.
MAX_RETRY_WAIT_S: Final = 30.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 10.0
DEFAULT_READ_TIMEOUT_S: Final = 300.0
DEFAULT_MAX_RETRIES: Final = 2
DEFAULT_RETRY_DELAY_S: Final = 0.5
_RETRYABLE_STATUS: Final = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class InvalidToolUse(ToolUse):
    """A tool call the model made with arguments that are not a JSON object."""

    raw_arguments: str = ""
    error: str = ""


class ProviderHTTPError(ProviderError):
    """The API answered with an HTTP error status."""

    def __init__(
        self, message: str, *, status: int, retryable: bool, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.retry_after = retry_after


# --- options ---------------------------------------------------------------------------


class Options:
    """``--provider-option key=value`` pairs, checked against the keys a provider knows."""

    def __init__(self, provider: str, options: Mapping[str, str] | None, known: frozenset[str]):
        self.provider = provider
        self.values = dict(options or {})
        unknown = sorted(set(self.values) - known)
        self.error: ProviderError | None = None
        if unknown:
            self.error = ProviderError(
                f"{provider}: unknown --provider-option {', '.join(unknown)};"
                f" known options: {', '.join(sorted(known))}"
            )

    def text(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)

    def number(self, key: str, default: float, *, minimum: float = 0.0) -> float:
        raw = self.values.get(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not value >= minimum:  # also rejects NaN
            self._fail(key, raw, f"a number >= {minimum:g}")
            return default
        return value

    def integer(self, key: str, default: int | None, *, minimum: int = 0) -> int | None:
        raw = self.values.get(key)
        if raw is None:
            return default
        if raw.strip().lower() in {"off", "none", "no"}:
            return None
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            self._fail(key, raw, f"an integer >= {minimum}")
            return default
        return value

    def flag(self, key: str, default: bool) -> bool:
        raw = self.values.get(key)
        if raw is None:
            return default
        low = raw.strip().lower()
        if low in {"1", "true", "yes", "on"}:
            return True
        if low in {"0", "false", "no", "off"}:
            return False
        self._fail(key, raw, "true or false")
        return default

    def _fail(self, key: str, raw: str, expected: str) -> None:
        if self.error is None:
            self.error = ProviderError(
                f"{self.provider}: --provider-option {key}={raw!r} is invalid; expected {expected}"
            )


# --- JSON helpers ----------------------------------------------------------------------


def decode_json(data: str | bytes) -> Any:
    """The JSON value, or ``_INVALID`` when the text is not JSON (never raises)."""
    import msgspec

    from tether import jsondepth

    try:
        return jsondepth.decode_any(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return _INVALID


_INVALID: Final[Any] = object()


def is_invalid(value: Any) -> bool:
    return value is _INVALID


def parse_tool_arguments(call_id: str, name: str, raw: str) -> ToolUse:
    """A ToolUse with the parsed arguments, or an :class:`InvalidToolUse` (never raises)."""
    if not raw.strip():
        return ToolUse(call_id, name, {})
    value = decode_json(raw)
    if isinstance(value, dict):
        return ToolUse(call_id, name, value)
    error = (
        "the arguments are not valid JSON"
        if is_invalid(value)
        else f"the arguments are JSON {type(value).__name__}, not an object"
    )
    return InvalidToolUse(call_id, name, {}, raw_arguments=raw, error=f"{error}: {short(raw)}")


def is_loopback_url(url: str) -> bool:
    """True when ``url`` names this machine: ``localhost``, 127.0.0.0/8 or ``::1``.

    A server there (a local model, the scripted model server) needs no API key.
    """
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def int_field(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def short(text: str, limit: int = ERROR_TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- HTTP errors -----------------------------------------------------------------------

_STATUS_HINTS: Final = {
    400: "the API rejected the request",
    401: "authentication failed; check the API key",
    403: "the API key may not use this resource",
    404: "not found; check --model and the base URL",
    413: "the request is too large; shorten the conversation",
    429: "rate limited; wait and try again",
}


def http_error(
    provider: str,
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    key_hint: str = "",
) -> ProviderHTTPError:
    """Translate an HTTP error response (JSON ``{"error": {type, message}}`` or anything else)."""
    kind, message = error_fields(decode_json(body))
    if not message:
        message = short(body.decode("utf-8", "replace")) or "(empty body)"
    hint = _STATUS_HINTS.get(status, "the service failed; try again later" if status >= 500 else "")
    if status == 401 and key_hint:
        hint = f"authentication failed; check {key_hint}"
    retryable = status in _RETRYABLE_STATUS or status >= 500
    should = headers.get("x-should-retry", "").lower()
    if should in {"true", "false"}:
        retryable = should == "true"
    label = f"{status} {kind}" if kind else str(status)
    text = f"{provider} API error {label}: {message}" + (f" ({hint})" if hint else "")
    return ProviderHTTPError(
        text, status=status, retryable=retryable, retry_after=retry_after(headers)
    )


def error_fields(payload: Any) -> tuple[str, str]:
    """``(type, message)`` of ``{"error": {"type": ..., "message": ...}}``; blanks if absent."""
    if not isinstance(payload, dict):
        return "", ""
    error = payload.get("error")
    if isinstance(error, str):
        return "", short(error)
    if not isinstance(error, dict):
        return "", ""
    kind = error.get("type") or error.get("code") or ""
    message = error.get("message") or ""
    return (short(kind) if isinstance(kind, str) else ""), (
        short(message) if isinstance(message, str) else ""
    )


def retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def transport_error(provider: str, url: str, exc: Exception, *, mid_stream: bool) -> ProviderError:
    """Translate an httpx transport failure; connection and timeout failures are retryable."""
    import httpx

    where = "mid-response" if mid_stream else "before the response"
    if isinstance(exc, httpx.TimeoutException):
        what = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for data"
        return ProviderError(
            f"{provider}: timed out {what} ({url}); the service is slow or unreachable,"
            " try again or raise --provider-option read_timeout",
            retryable=True,
        )
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ProviderError(f"{provider}: invalid base URL {url!r}: {exc}")
    if isinstance(exc, httpx.ConnectError):
        return ProviderError(
            f"{provider}: could not connect to {url}: {short(str(exc)) or type(exc).__name__};"
            " check the base URL and that the server is running",
            retryable=True,
        )
    if isinstance(exc, httpx.TransportError):
        return ProviderError(
            f"{provider}: the connection failed {where}"
            f" ({type(exc).__name__}: {short(str(exc))}); try again",
            retryable=True,
        )
    return ProviderError(f"{provider}: HTTP failure ({type(exc).__name__}: {short(str(exc))})")


# --- the shared SSE request loop -------------------------------------------------------


class StreamParser(Protocol):
    """A provider's sans-IO mapping from SSE events to stream events."""

    done: bool  # the terminal event arrived; stop reading

    def receive(self, event: SSEEvent) -> list[StreamEvent]: ...  # may raise ProviderError

    def end_of_stream(self) -> list[StreamEvent]: ...  # raises ProviderError if cut short


@dataclass(frozen=True, slots=True)
class HTTPCall:
    provider: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    key_hint: str = ""
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_delay: float = DEFAULT_RETRY_DELAY_S


def make_client(connect: float, read: float) -> httpx.AsyncClient:
    import httpx

    timeout = httpx.Timeout(connect=connect, read=read, write=60.0, pool=connect)
    return httpx.AsyncClient(timeout=timeout)


async def stream_sse(
    client: httpx.AsyncClient, call: HTTPCall, new_parser: Callable[[], StreamParser]
) -> AsyncGenerator[StreamEvent, None]:
    """POST ``call`` and stream the parsed events, retrying retryable failures while
    nothing has been yielded yet (at most ``call.max_retries`` times, with backoff)."""
    import asyncio

    import httpx

    from tether.agent.providers.sse import SSEDecoder

    attempt = 0
    while True:
        emitted = False
        try:
            async with client.stream(
                "POST", call.url, content=call.body, headers=dict(call.headers)
            ) as response:
                await _check_status(response, call)
                parser, decoder = new_parser(), SSEDecoder()
                async for chunk in response.aiter_bytes():
                    events, failure = _receive(decoder, parser, chunk, call.provider)
                    for event in events:
                        emitted = True
                        yield event
                    if failure is not None:
                        raise failure
                    if parser.done:
                        break
                else:
                    for event in parser.end_of_stream():
                        emitted = True
                        yield event
            return
        except (ProviderError, httpx.HTTPError) as exc:
            error = (
                exc
                if isinstance(exc, ProviderError)
                else transport_error(call.provider, call.url, exc, mid_stream=emitted)
            )
            delay = _retry_delay(error, attempt, call) if not emitted else None
            if delay is None:
                if error is exc:
                    raise
                raise error from exc
        attempt += 1
        await asyncio.sleep(delay)


async def _check_status(response: httpx.Response, call: HTTPCall) -> None:
    """Raise for an error status, or for a JSON body where an event stream belongs."""
    is_json = response.headers.get("content-type", "").startswith("application/json")
    if response.status_code < 300 and not is_json:
        return
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk[: ERROR_BODY_BYTES - len(body)]
        if len(body) >= ERROR_BODY_BYTES:
            break
    if response.status_code >= 300:
        raise http_error(
            call.provider,
            response.status_code,
            bytes(body),
            response.headers,
            key_hint=call.key_hint,
        )
    kind, message = error_fields(decode_json(bytes(body)))
    detail = (
        f"{kind}: {message}"
        if kind and message
        else message or short(body.decode("utf-8", "replace"))
    )
    raise ProviderError(
        f"{call.provider}: expected an event stream but the server answered with JSON: {detail}"
        " (does the server support streaming?)"
    )


def _receive(
    decoder: SSEDecoder, parser: StreamParser, chunk: bytes, provider: str
) -> tuple[list[StreamEvent], ProviderError | None]:
    """The events ``chunk`` completes, and the error that stopped them (yield, then raise)."""
    from tether.agent.providers.sse import SSERejection

    out: list[StreamEvent] = []
    for item in decoder.feed(chunk):
        if isinstance(item, SSERejection):
            error = f"{provider}: the stream sent an over-long event; {item.reason}"
            return out, ProviderError(error)
        try:
            out += parser.receive(item)
        except ProviderError as exc:
            return out, exc
        if parser.done:
            break
    return out, None


def _retry_delay(error: ProviderError, attempt: int, call: HTTPCall) -> float | None:
    if not error.retryable or attempt >= call.max_retries:
        return None
    after = error.retry_after if isinstance(error, ProviderHTTPError) else None
    if after is not None:
        return after if after <= MAX_RETRY_WAIT_S else None
    import random

    base = min(call.retry_delay * 2.0**attempt, MAX_RETRY_WAIT_S)
    return base * random.uniform(0.75, 1.0)  # noqa: S311 (jitter, not crypto)
