"""Web search backends for the WebSearch tool (`[web_search]` in the providers file).

    kind = "searxng"   self-hosted SearXNG: GET {base_url}/search?q=...&format=json (JSON output
                       must be enabled in its settings.yml: search.formats includes json)
    kind = "brave"     Brave Search API: GET {base_url}/res/v1/web/search?q=...&count=N,
                       header X-Subscription-Token
    kind = "tavily"    Tavily: POST {base_url}/search {"query", "max_results"}, Bearer key

Every backend returns the same `SearchHit(title, url, snippet)` list; a failure is a `SearchFailed`
with a message for the model (the tool result is an error it sees, never a made-up result). Keys
never appear in messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import httpx

from ...providers.config import SearchConfig

TIMEOUT_S = 20.0
SNIPPET_CHARS = 500


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """The backend could not answer; `str()` is shown to the model (no key material)."""


class SearchBackend(Protocol):
    kind: str
    max_results: int

    async def search(self, http: httpx.AsyncClient, query: str) -> list[SearchHit]: ...


def search_backend(config: SearchConfig) -> SearchBackend:
    return {"searxng": SearxngSearch, "brave": BraveSearch, "tavily": TavilySearch}[config.kind](config)


_TAGS = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def _clean(text: object, limit: int = SNIPPET_CHARS) -> str:
    """Plain one-paragraph text: engines put <strong> highlights and newlines into snippets."""
    value = _SPACE.sub(" ", _TAGS.sub("", str(text or ""))).strip()
    return value if len(value) <= limit else value[: limit - 1].rstrip() + "…"


def _hits(items: object, title: str, url: str, snippet: str, limit: int) -> list[SearchHit]:
    if not isinstance(items, list):
        raise SearchFailed("the search backend answered without a result list")
    hits = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get(url), str) and item[url].startswith(("http://", "https://")):
            hits.append(SearchHit(_clean(item.get(title), 200) or item[url], item[url], _clean(item.get(snippet))))
        if len(hits) >= limit:
            break
    return hits


async def _call(http: httpx.AsyncClient, what: str, request: httpx.Request) -> object:
    try:
        response = await http.send(request)
    except httpx.HTTPError as e:
        raise SearchFailed(f"{what} could not be reached: {type(e).__name__}") from None
    if response.status_code != 200:
        raise SearchFailed(f"{what} answered HTTP {response.status_code}"
                           + (" (check its API key)" if response.status_code in (401, 403) else ""))
    try:
        return response.json()
    except ValueError:
        raise SearchFailed(f"{what} did not answer JSON") from None


class _Backend:
    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.kind = config.kind
        self.max_results = config.max_results

    def key(self) -> str:
        from .keys import resolve_key

        return resolve_key(self.config.api_key, self.config.api_key_env, f"[web_search] kind = {self.kind!r}",
                           SearchFailed)


class SearxngSearch(_Backend):
    async def search(self, http: httpx.AsyncClient, query: str) -> list[SearchHit]:
        request = http.build_request("GET", f"{self.config.base_url}/search",
                                     params={"q": query, "format": "json"}, timeout=TIMEOUT_S)
        if self.config.api_key or self.config.api_key_env:  # behind an authenticating reverse proxy
            request.headers["Authorization"] = f"Bearer {self.key()}"
        data = await _call(http, "SearXNG", request)
        return _hits(data.get("results") if isinstance(data, dict) else None, "title", "url", "content",
                     self.max_results)


class BraveSearch(_Backend):
    async def search(self, http: httpx.AsyncClient, query: str) -> list[SearchHit]:
        request = http.build_request(
            "GET", f"{self.config.base_url}/res/v1/web/search", params={"q": query, "count": self.max_results},
            headers={"X-Subscription-Token": self.key(), "Accept": "application/json"}, timeout=TIMEOUT_S)
        data = await _call(http, "Brave Search", request)
        web = data.get("web") if isinstance(data, dict) else None
        return _hits(web.get("results", []) if isinstance(web, dict) else [], "title", "url", "description",
                     self.max_results)


class TavilySearch(_Backend):
    async def search(self, http: httpx.AsyncClient, query: str) -> list[SearchHit]:
        request = http.build_request(
            "POST", f"{self.config.base_url}/search", json={"query": query, "max_results": self.max_results},
            headers={"Authorization": f"Bearer {self.key()}"}, timeout=TIMEOUT_S)
        data = await _call(http, "Tavily", request)
        return _hits(data.get("results") if isinstance(data, dict) else None, "title", "url", "content",
                     self.max_results)


def results_text(query: str, hits: list[SearchHit]) -> str:
    """The canonical string the model reads: numbered title, URL and snippet per hit."""
    if not hits:
        return f"No web results for {query!r}."
    lines = [f"Web results for {query!r}:"]
    for i, hit in enumerate(hits, 1):
        lines += ["", f"{i}. {hit.title}", f"   {hit.url}"]
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
