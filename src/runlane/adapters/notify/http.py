"""What both HTTP notifiers share: one bounded POST (or GET), and how a response or a transport
error is classified (`NotifyTemporaryError` with a retry time, or `NotifyPermanentError`)."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Mapping

import httpx

from runlane.ports.notifier import NotifyError, NotifyPermanentError, NotifyTemporaryError

MAX_RETRY_AFTER = 3600.0  # a Retry-After further out than this is read as an hour
_TEMPORARY_STATUSES = frozenset({408, 425, 429})


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), at most an
    hour; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # (`"²".isdigit()`, but float("²") fails)
        return min(float(text), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return min(max(0.0, when.timestamp() - current), MAX_RETRY_AFTER)


def classify_response(target: str, response: httpx.Response) -> NotifyError | None:
    """None for a 2xx; a temporary error for 408, 425, 429 and 5xx (with Retry-After when
    given); a permanent one for the other statuses (a bad token, a wrong URL)."""
    status = response.status_code
    if 200 <= status < 300:
        return None
    reason = f"{target}: HTTP {status}"
    if status in _TEMPORARY_STATUSES or status >= 500:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return NotifyTemporaryError(reason, retry_after=retry_after)
    return NotifyPermanentError(reason)


class HttpNotifier:
    """One `httpx.AsyncClient` per target (connections reused), every call bounded."""

    name: str

    def __init__(self, name: str, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.name = name
        # No redirects: a notification is not re-sent somewhere the configuration does not say.
        self._client = httpx.AsyncClient(follow_redirects=False, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(
        self,
        method: str,
        url: str,
        *,
        within: float,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
    ) -> None:
        """One request; raise a classified `NotifyError` unless it answered 2xx in time. The
        messages name the target, never its URL (which may hold a token)."""
        try:
            async with asyncio.timeout(within):
                response = await self._client.request(
                    method, url, headers=headers, content=content, timeout=within
                )
        except TimeoutError:
            raise NotifyTemporaryError(f"{self.name}: no answer within {within:g}s") from None
        except httpx.TimeoutException:
            raise NotifyTemporaryError(f"{self.name}: no answer within {within:g}s") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL):
            raise NotifyPermanentError(f"{self.name}: the URL is not usable") from None
        except (httpx.LocalProtocolError, UnicodeEncodeError):
            # A header value HTTP cannot carry (a configured token with a newline, or not
            # ASCII): no retry can send it. The value is a secret: not in the message.
            raise NotifyPermanentError(
                f"{self.name}: a header value (the token?) holds a character HTTP headers "
                "cannot carry (a newline, a non-ASCII character)"
            ) from None
        except httpx.HTTPError as exc:
            raise NotifyTemporaryError(f"{self.name}: {type(exc).__name__}") from None
        error = classify_response(self.name, response)
        if error is not None:
            raise error
