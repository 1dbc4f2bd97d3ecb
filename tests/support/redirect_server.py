"""A tiny HTTP server for the WebFetch redirect walk, run inside a network namespace at a public-looking
address (tests/e2e/test_trust.py): `/short` redirects to `/long`, `/to-private` to the URL given on the
command line; every other path answers 200. Prints `listening` once bound, then one line per request.

    python -m tests.support.redirect_server HOST PORT PRIVATE_URL
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    host, port, private_url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    redirects = {"/short": "/long", "/to-private": private_url}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            print(f"GET {self.path}", flush=True)
            if self.path in redirects:
                self.send_response(302)
                self.send_header("location", redirects[self.path])
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body = b"a page\n"
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
