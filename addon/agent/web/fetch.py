"""What WebFetch adds around Cursor's own fetch (the client executes `fetch_args`; the proxy reads only
response headers itself, while it walks redirects):

- a private-address guard, before the user is even asked: a URL whose host is (or resolves to) a
  loopback, link-local, private or otherwise non-public address is refused, unless the user allows
  it (`byok_web_fetch_private`). The model cannot point the user's machine at their router, a
  cloud metadata endpoint or a local admin port. It fails closed: a name that does not resolve is
  refused (what cannot be checked is not fetched).
- redirects checked before they are followed: after the user approved, the proxy walks the URL's
  redirects itself (GET, headers only, never following on its own), checks each next hop before
  requesting it, and gives Cursor the final URL. Cursor's own fetch may still be redirected
  (a server may answer it differently); where it ended up is checked again afterwards.
- not checked (docs/tools.md): the client resolves the name again when it fetches, and so does the
  proxy's own redirect walk, so a name whose DNS answer changes in between is not caught (DNS
  rebinding; the walk's GET could then reach a private address of the proxy's own network); a server that redirects Cursor
  elsewhere than the proxy is caught only after Cursor fetched; redirects made by the page itself
  (HTML meta refresh, JavaScript) are not followed by anyone.
- a size cap on what comes back (`byok_web_fetch_max_kb`): the rest of a larger page is cut before
  any parsing, and the model is told.
- readable text: an HTML page becomes its main text as Markdown (trafilatura: boilerplate such as
  navigation, footers and cookie banners removed; headings, lists, tables and links kept). Other
  content types are passed as text.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

RESOLVE_TIMEOUT_S = 5.0
DEFAULT_MAX_KB = 2048
MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
WALK_TIMEOUT_S = 15.0
WALK_HEADERS = {"user-agent": "cursor-byok (WebFetch redirect check)", "accept": "*/*"}


class FetchRefused(Exception):
    """The URL may not be fetched; `str()` tells the model (and the user, on the card) why."""


@dataclass(frozen=True)
class FetchPolicy:
    allow_private: bool = False
    max_bytes: int = DEFAULT_MAX_KB * 1024
    check_redirects: bool = True
    """Walk an approved URL's redirects from the proxy before Cursor fetches it (byok_web_fetch_check_redirects)."""

    async def check(self, url: str) -> None:
        """Raise FetchRefused for a URL on a non-public address (unless private ones are allowed), and
        for one whose host does not resolve: what cannot be checked is not fetched."""
        if self.allow_private:
            return
        host = urlsplit(url).hostname or ""
        addresses = await _addresses(host) if host else []
        if not addresses:
            raise FetchRefused(
                f"{url}: the host {host or '(none)'} does not resolve here, so WebFetch cannot check that it is "
                "a public address, and does not fetch it. The user can allow private addresses (which turns "
                "this check off) with --set byok_web_fetch_private=true.")
        for address in addresses:
            if not address.is_global:
                raise FetchRefused(
                    f"{url} points to a {_kind(address)} address ({address}); WebFetch only reaches public "
                    "addresses. The user can allow private ones with --set byok_web_fetch_private=true.")

    async def follow(self, url: str, http: httpx.AsyncClient | None) -> str:
        """Where `url` leads: its redirects walked from the proxy, each next hop checked before it is
        requested (headers only, no body read). Returns the final URL, for Cursor to fetch."""
        if self.allow_private or not self.check_redirects:
            return url
        if http is None:
            raise FetchRefused(f"cursor-byok has no HTTP client to check where {url} leads; it is not fetched")
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with http.stream("GET", current, headers=WALK_HEADERS, follow_redirects=False,
                                       timeout=WALK_TIMEOUT_S) as response:
                    status, location = response.status_code, response.headers.get("location")
            except httpx.HTTPError as e:
                raise FetchRefused(f"cursor-byok could not check where {url} leads ({current}: "
                                   f"{type(e).__name__}: {e}); WebFetch does not fetch what it cannot check") from None
            if status not in REDIRECT_STATUSES or not location:
                return current
            following = urljoin(current, location)
            if urlsplit(following).scheme not in ("http", "https"):
                raise FetchRefused(f"{url} redirects to {following}, which is not an http(s) URL")
            try:
                await self.check(following)
            except FetchRefused as e:
                raise FetchRefused(f"{url} redirects to {e}") from None
            current = following
        raise FetchRefused(f"{url} redirects more than {MAX_REDIRECTS} times; WebFetch stops there")

    def cap(self, content: str) -> tuple[str, bool]:
        data = content.encode("utf-8")
        if len(data) <= self.max_bytes:
            return content, False
        return data[: self.max_bytes].decode("utf-8", errors="ignore"), True


def _kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    for attr, name in (("is_loopback", "loopback"), ("is_link_local", "link-local"), ("is_private", "private"),
                       ("is_multicast", "multicast"), ("is_unspecified", "unspecified")):
        if getattr(address, attr):
            return name
    return "non-public"


async def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    host = host.strip("[]").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        mapped = getattr(address, "ipv4_mapped", None)
        return [address, mapped] if mapped else [address]
    if host == "localhost" or host.endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    try:
        infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM),
                                       RESOLVE_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, UnicodeError):
        return []  # not resolved: the caller refuses (fail closed)
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


def is_html(content: str, content_type: str) -> bool:
    if content_type:
        return "html" in content_type.lower()
    head = content[:512].lstrip().lower()
    return head.startswith(("<!doctype html", "<html"))


def readable_text(content: str, url: str) -> str | None:
    """The main text of an HTML page as Markdown, or None when it has none (CPU work: call it in a
    worker thread)."""
    import trafilatura

    return trafilatura.extract(content, url=url or None, output_format="markdown", include_links=True,
                               include_tables=True, include_comments=False, favor_recall=True)
