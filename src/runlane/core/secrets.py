"""Secrets in database URLs: masking them for messages and logs. Pure string work."""

from __future__ import annotations

import re
import urllib.parse

SECRET_KEYS = frozenset({"password", "sslpassword"})
_KEYWORD_SECRET = re.compile(r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*|'.*)")


def mask_url(url: str) -> str:
    """The URL with every secret replaced by `***`: the userinfo password, `password` and
    `sslpassword` in the query string, and `password=` / `sslpassword=` in a `key=value`
    connection string. Plain string work (never a URL parser that can reject what libpq takes:
    several hosts, odd ports, broken brackets), so it masks whatever it is given and never
    raises."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KEYWORD_SECRET.sub(r"\1***", url)
    # libpq reads the credentials up to the last `@` before the first `/`.
    slash = rest.find("/")
    head = rest if slash < 0 else rest[:slash]
    at = head.rfind("@")
    if at >= 0 and ":" in head[:at]:
        user = head[:at].split(":", 1)[0]
        rest = f"{user}:***@{rest[at + 1 :]}"
    base, qmark, query = rest.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        fields = []
        for field in query.split("&"):
            key, eq, _value = field.partition("=")
            if eq and urllib.parse.unquote_plus(key).strip().lower() in SECRET_KEYS:
                field = f"{key}=***"
            fields.append(field)
        rest = f"{base}?{'&'.join(fields)}{hash_}{fragment}"
    return f"{scheme}://{rest}"


def url_secrets(url: str) -> list[str]:
    """The secret values a database URL carries (raw and percent-decoded), longest first, so a
    message that may echo the URL can have them removed (`mask_secrets`)."""
    found: set[str] = set()
    _scheme, sep, rest = url.partition("://")
    if sep:
        slash = rest.find("/")
        head = rest if slash < 0 else rest[:slash]
        at = head.rfind("@")
        if at >= 0 and ":" in head[:at]:
            found.add(head[:at].split(":", 1)[1])
        for field in rest.partition("?")[2].partition("#")[0].split("&"):
            key, eq, value = field.partition("=")
            if eq and urllib.parse.unquote_plus(key).strip().lower() in SECRET_KEYS:
                found.add(value)
    else:
        for match in _KEYWORD_SECRET.finditer(url):
            found.add(match.group(2).strip("'"))
    decoded = {urllib.parse.unquote(s) for s in found} | {
        urllib.parse.unquote_plus(s) for s in found
    }
    return sorted({s for s in found | decoded if s}, key=len, reverse=True)


def mask_secrets(text: str, url: str) -> str:
    """`text` (an error message, say) with the secrets of `url` in it replaced by `***`."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
