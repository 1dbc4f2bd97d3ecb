"""An httpx client for the WebFetch redirect walk in unit tests: answers from a table, never the
network. `pages` maps a URL to (status, location or None); any other URL answers 200.

    http, seen = walk_client({"https://93.184.215.14/a": (302, "https://93.184.215.14/b")})
    WebTools(http=http)  ... seen == ["https://93.184.215.14/a", "https://93.184.215.14/b"]
"""

from __future__ import annotations

import httpx


def walk_client(pages: dict[str, tuple[int, str | None]] | None = None) -> tuple[httpx.AsyncClient, list[str]]:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        status, location = (pages or {}).get(str(request.url), (200, None))
        return httpx.Response(status, headers={"location": location} if location else {}, content=b"page")

    return httpx.AsyncClient(transport=httpx.MockTransport(answer)), seen
