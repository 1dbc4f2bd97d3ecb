"""Tab: what cursor-byok adds to the provider's first token, against a bare mitmdump relaying StreamCpp
(not a test):

    python bench/tab_vs_bare.py [--calls 200] [--no-h2]

Both proxies serve the same Cursor-like Tab client (tests/support/tab_client.py; a new connection per
call, as Cursor opens one per keystroke often enough). The bare mitmdump relays StreamCpp to a local
TLS "Cursor" that answers model_info, range_to_replace, then text frames; its first text frame
carries its own send time. mitmdump with the addon answers the same StreamCpp itself from a local
scripted FIM provider (openai_completions) whose first completion chunk carries its send time. The
clock is time.monotonic() in this one process, so each call's latency is exact:

- first text: source's send time of the first token -> the client decoded the first text frame
  (bare: relayed frame; addon: the provider's SSE chunk parsed, filtered, framed) - p50 / p90 / max
- call:       request sent -> end-stream decoded (the source answers at once: pure proxy cost)

The difference of the two first-text p50s is what the addon adds to the provider's first token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from byok.proto import cpp_pb2 as cpb  # noqa: E402
from byok.wire import connect  # noqa: E402
from tests.e2e.harness import API_KEY, Proxy  # noqa: E402
from tests.support.fake_cursor import FakeCursor  # noqa: E402
from tests.support.scripted_provider import COMPLETIONS, Ev, ScriptedProvider, Sse  # noqa: E402
from tests.support.tab_client import STREAM_CPP, request, stream_cpp  # noqa: E402

STAMP = re.compile(r"#(\d+\.\d+)#")
CONTENTS = "def area(r):\n    return 3.14159 * \n\nprint(area(2))\n"


class StampedCursor(FakeCursor):
    """A fake Cursor whose StreamCpp answer's first text frame carries its send time."""

    async def _respond(self, path: str, writer) -> None:
        if path != STREAM_CPP:
            return await super()._respond(path, writer)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\ntransfer-encoding: chunked\r\n\r\n")
        frames = [cpb.StreamCppResponse(model_info=cpb.StreamCppResponse.ModelInfo()),
                  cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=2, end_line_number_inclusive=2))]
        head = b"".join(connect.encode_envelope(f.SerializeToString()) for f in frames)
        first = connect.encode_envelope(cpb.StreamCppResponse(
            text=f"    return 3.14159 * #{time.monotonic():.9f}#").SerializeToString())
        writer.write(b"%x\r\n%s\r\n" % (len(head + first), head + first))
        await writer.drain()
        tail = b"".join(connect.encode_envelope(f.SerializeToString()) for f in (
            cpb.StreamCppResponse(text=" r * r"), cpb.StreamCppResponse(done_stream=True))) + connect.encode_end_stream()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        await writer.drain()


class StampedChunk(Ev):
    """A completions chunk whose text is its send time, rendered when the provider writes it."""

    def encode(self) -> bytes:
        chunk = COMPLETIONS._chunker(False)(f"#{time.monotonic():.9f}#")
        return f"data: {json.dumps(chunk)}\n\n".encode()


def provider_script() -> Sse:
    tail = COMPLETIONS.text_reply(" r * r", pieces=1).items
    return Sse([StampedChunk("")] + tail)


def providers_toml(base_url: str) -> str:
    return (f'[[providers]]\nname = "local"\nkind = "openai_completions"\nbase_url = "{base_url}"\n'
            f'api_key = "{API_KEY}"\n[[providers.models]]\nid = "coder"\n\n[tab]\nmodel = "local/coder"\n')


async def measure(proxy: Proxy, calls: int, http2: bool, before_each=None) -> tuple[list[float], list[float]]:
    firsts, totals = [], []
    req = request(CONTENTS, 1, 21)
    for _ in range(calls):
        if before_each is not None:
            before_each()
        started = time.monotonic()
        answer = await stream_cpp(proxy.url, proxy.ca_file, req, http2=http2)
        assert answer.error is None and answer.ended, answer.error
        index = next(i for i, f in enumerate(answer.frames) if f.text)
        sent = float(STAMP.search(answer.frames[index].text).group(1))
        arrived = answer.times[index]
        firsts.append((arrived - sent) * 1000)
        totals.append((answer.times[-1] - started) * 1000)
    return firsts, totals


def summary(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[int(len(values) * 0.9) - 1]
    return f"p50 {statistics.median(values):6.2f} ms  p90 {p90:6.2f} ms  max {values[-1]:6.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-h2", action="store_true", help="HTTP/1.1 only")
    args = parser.parse_args()
    transports = [False] if args.no_h2 else [False, True]
    results: dict[tuple[str, bool], tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, StampedCursor() as cursor, ScriptedProvider() as provider:
        redirect = [str(ROOT / "tests/support/redirect_upstream.py")]
        opts = {"test_upstream": f"127.0.0.1:{cursor.port}", "ssl_insecure": "true"}
        # no addon, the same redirect; lazy like cursor-byok sets it, so both offer the client HTTP/2
        bare = Proxy(Path(tmp) / "bare", extra_scripts=redirect, options={**opts, "connection_strategy": "lazy"})
        bare.home.mkdir(parents=True)
        addon_home = Path(tmp) / "addon"
        addon_home.mkdir()
        (addon_home / "providers.toml").write_text(providers_toml(provider.base_url))
        addon = Proxy(addon_home, extra_scripts=redirect, options={**opts, "byok_upstream_probe_ms": "0"}).start()
        bare_proc = start_bare(bare)
        try:
            for http2 in transports:
                asyncio.run(measure(bare_proc, 10, http2))  # warm-up
                results[("bare", http2)] = asyncio.run(measure(bare_proc, args.calls, http2))
                for _ in range(10):
                    provider.enqueue("openai_completions", provider_script())
                asyncio.run(measure(addon, 10, http2))
                results[("addon", http2)] = asyncio.run(measure(
                    addon, args.calls, http2, before_each=lambda: provider.enqueue("openai_completions", provider_script())))
        finally:
            addon.stop()
            bare_proc.stop()
    print(f"Tab: provider/upstream first token -> client first text frame ({args.calls} calls each, sequential)")
    for http2 in transports:
        name = "HTTP/2" if http2 else "HTTP/1.1"
        (bf, bt), (af, at) = results[("bare", http2)], results[("addon", http2)]
        print(f"  {name:8} bare mitmdump  first text {summary(bf)}   whole call {summary(bt)}")
        print(f"  {name:8} cursor-byok    first text {summary(af)}   whole call {summary(at)}")
        print(f"  {name:8} added by cursor-byok to the first token (p50): "
              f"{statistics.median(af) - statistics.median(bf):+.2f} ms")
    return 0


def start_bare(proxy: Proxy) -> Proxy:
    """A mitmdump without cursor-byok (only the test redirect), started like the harness starts one."""
    import subprocess

    from tests.e2e.harness import MITMDUMP, without_proxy_env

    args = [MITMDUMP, "-s", proxy.extra_scripts[0], "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", f"confdir={proxy.confdir}"]
    for key, value in proxy.options.items():
        args += ["--set", f"{key}={value}"]
    log = open(proxy.log_path, "ab")
    proxy.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=without_proxy_env(os.environ),
                                     start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"proxy listening at ([\d.]+):(\d+)", proxy.log())
        if found:
            proxy.host, proxy.port = found.group(1), int(found.group(2))
            return proxy
        time.sleep(0.05)
    raise RuntimeError(f"bare mitmdump not ready:\n{proxy.log()}")


if __name__ == "__main__":
    sys.exit(main())
