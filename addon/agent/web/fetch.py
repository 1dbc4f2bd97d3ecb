"""What WebFetch adds around Cursor's own fetch (the client executes `fetch_args`; the proxy never
downloads the page itself):

- a private-address guard, before the user is even asked: a URL whose host is (or resolves to) a
  loopback, link-local, private or otherwise non-public address is refused, unless the user allows
  it (`byok_web_fetch_private`). The model cannot point the user's machine at their router, a
  cloud metadata endpoint or a local admin port. The client resolves the name again when it
  fetches, so a name whose DNS answer changes in between is not caught (DNS rebinding).
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
from urllib.parse import urlsplit

RESOLVE_TIMEOUT_S = 5.0
DEFAULT_MAX_KB = 2048


class FetchRefused(Exception):
    """The URL may not be fetched; `str()` tells the model (and the user, on the card) why."""


@dataclass(frozen=True)
class FetchPolicy:
    allow_private: bool = False
    max_bytes: int = DEFAULT_MAX_KB * 1024

    async def check(self, url: str) -> None:
        """Raise FetchRefused for a URL on a non-public address (unless private ones are allowed)."""
        if self.allow_private:
            return
        host = urlsplit(url).hostname or ""
        for address in await _addresses(host):
            if not address.is_global:
                raise FetchRefused(
                    f"{url} points to a {_kind(address)} address ({address}); WebFetch only reaches public "
                    "addresses. The user can allow private ones with --set byok_web_fetch_private=true.")

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
    except (OSError, asyncio.TimeoutError):
        return []  # the client cannot resolve it either; its fetch reports the failure
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
