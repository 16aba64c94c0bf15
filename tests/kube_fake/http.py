"""A tiny raw HTTP client for asserting exact bytes, status codes and headers of the fake."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class Raw:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = (
                json.dumps(body).encode()
                if body is not None and not isinstance(body, bytes)
                else body
            )
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            ctype = resp.getheader("Content-Type") or ""
            parsed: Any = (
                json.loads(raw) if ctype.startswith("application/json") and raw else raw.decode()
            )
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
        finally:
            conn.close()

    def watch_lines(self, path: str, timeout: float = 10.0) -> tuple[int, list[dict[str, Any]]]:
        """Read a whole (server-ended) watch stream: status and the decoded events."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                return resp.status, [json.loads(raw)]
            return resp.status, [json.loads(line) for line in raw.splitlines() if line.strip()]
        finally:
            conn.close()
