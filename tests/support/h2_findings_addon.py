"""Test-only mitmproxy script for re-verifying the mitmproxy 11 HTTP/2 findings without cursor-byok.

    mitmdump -s tests/support/h2_findings_addon.py -s tests/support/redirect_upstream.py ...

Options (all off by default, so the bare behaviour shows):
- finding_stream: stream Run requests and responses (requestheaders / responseheaders);
- finding_duplex: install cursor-byok's full-duplex patch and mark Run flows with it;
- finding_loopback: host:port of a plain HTTP/1.1 server that Run requests are sent to;
- finding_chunked: add `transfer-encoding: chunked` to the request sent to that server.
"""

from mitmproxy import ctx, http

from byok import duplex

RUN = "/agent.v1.AgentService/Run"


class Findings:
    def load(self, loader):
        loader.add_option("finding_stream", bool, False, "stream Run bodies both ways")
        loader.add_option("finding_duplex", bool, False, "forward a Run response's end at once")
        loader.add_option("finding_loopback", str, "", "send Runs to this HTTP/1.1 host:port")
        loader.add_option("finding_chunked", bool, False, "add transfer-encoding: chunked for the loopback")

    def configure(self, updated):
        if ctx.options.finding_duplex:
            duplex.install()

    def requestheaders(self, flow: http.HTTPFlow):
        if flow.request.path != RUN:
            return
        if ctx.options.finding_stream:
            flow.request.stream = True
        if ctx.options.finding_duplex:
            flow.metadata[duplex.FULL_DUPLEX] = True
        if ctx.options.finding_loopback:
            host, port = ctx.options.finding_loopback.rsplit(":", 1)
            flow.request.scheme, flow.request.host, flow.request.port = "http", host, int(port)
            if ctx.options.finding_chunked:
                flow.request.headers["transfer-encoding"] = "chunked"

    def responseheaders(self, flow: http.HTTPFlow):
        if flow.request.path == RUN and ctx.options.finding_stream:
            flow.response.stream = True


addons = [Findings()]
