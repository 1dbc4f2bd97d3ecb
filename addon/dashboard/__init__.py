"""The dashboard at http://cursor-byok.invalid/: a view of the store, not a second app.

- queries.py: the store queries `trace`, `usage`, `drift` and the pages share (one query layer).
- views.py: request path + viewer -> page, rendered with the jinja2 templates in templates/ (no
  mitmproxy here); charts.py draws the SVG charts on the server.
- ../dashboard_endpoint.py: the thin mitmproxy side (who is looking, the live-run stream through the
  loopback stream server).
"""
