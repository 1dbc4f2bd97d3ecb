"""The mitmproxy-facing transports: how a Cursor RPC reaches an engine and how its answer goes back.

- runsse.py      RunSSE + BidiAppend (the HTTP/1.1 agent transport): appends answered in `request`, the
                 RunSSE flow pointed at the loopback stream server
- run_h2.py      the HTTP/2 agent `Run` (bidi): routed at its headers to the loopback server, which reads
                 up to the run_request and serves the run or relays it to Cursor through mitmproxy
- one_shot.py    one-shot calls (Tab, commit messages, titles, ...): unary answers in `request`, server
                 streams through the loopback server
- loopback.py    what every flow pointed at the loopback server shares (display host, tee, client errors)
- stream_server.py  the in-process loopback HTTP/1.1 server those flows reach
- h2conn.py      a small HTTP/2 client (the Run relay; the CLI's HTTP/2 client)
The engines behind them (agent/, assist/) never import mitmproxy.
"""
