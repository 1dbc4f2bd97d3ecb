"""Fake web backends on loopback for the web tools' tests: one HTTP server that answers as SearXNG
(`GET /search?format=json`), the Brave Search API (`GET /res/v1/web/search`), Tavily
(`POST /search`, JSON body) and an OpenAI-compatible images endpoint (`POST /images/generations`),
and records every request (method, path, query, headers, JSON body).

    with FakeWeb() as web:
        web.results = [("Title", "https://example.org/a", "snippet")]
        ... point [web_search] base_url at web.base_url ...
        assert web.requests[-1].query["q"] == ["the search term"]
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def tiny_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A valid PNG of one colour (no imaging library needed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    json: object = None


@dataclass
class FakeWeb:
    results: list[tuple[str, str, str]] = field(default_factory=list)
    """(title, url, snippet) answered by every search API, each in its own shape."""
    image: bytes = field(default_factory=tiny_png)
    status: int = 200
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _seen(self) -> Seen:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                seen = Seen(self.command, parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()},
                            body)
                fake.requests.append(seen)
                return seen

            def do_GET(self) -> None:
                seen = self._seen()
                if fake.status != 200:
                    self._answer(fake.status, {"error": "scripted failure"})
                elif seen.path == "/search" and seen.query.get("format") == ["json"]:
                    self._answer(200, {"query": seen.query["q"][0], "results": [
                        {"title": t, "url": u, "content": s, "engine": "fake"} for t, u, s in fake.results]})
                elif seen.path == "/res/v1/web/search":
                    self._answer(200, {"type": "search", "web": {"results": [
                        {"title": t, "url": u, "description": f"<strong>{s}</strong>"} for t, u, s in fake.results]}})
                else:
                    self._answer(404, {"error": f"no route {seen.path}"})

            def do_POST(self) -> None:
                seen = self._seen()
                if fake.status != 200:
                    self._answer(fake.status, {"error": {"message": "scripted failure"}})
                elif seen.path == "/search":
                    self._answer(200, {"query": seen.json["query"], "results": [
                        {"title": t, "url": u, "content": s, "score": 0.9} for t, u, s in fake.results]})
                elif seen.path == "/images/generations":
                    self._answer(200, {"created": 1, "data": [
                        {"b64_json": base64.b64encode(fake.image).decode(), "revised_prompt": seen.json["prompt"]}]})
                else:
                    self._answer(404, {"error": f"no route {seen.path}"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeWeb":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
