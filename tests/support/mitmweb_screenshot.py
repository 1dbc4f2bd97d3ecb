"""Takes docs/img/mitmweb-runsse.png: a real mitmweb session with a RunSSE flow selected.

    python -m tests.support.mitmweb_screenshot [out.png] [--flow runsse|append]

Starts `mitmweb -s addon/cursor_byok.py` headless (temporary confdir, database, providers file),
drives one agent turn with a Read tool round through it (the Cursor-like client and the scripted
provider), then has Debian's `chromium` (headless) open mitmweb's page of that flow and save a
screenshot (shrunk with `pngquant` when installed). Nothing touches `~` or the network.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from byok.providers.config import public_model_id
from byok.cli.client import CursorClient, user_turn_request
from byok.cli.executor import LocalExecutor
from tests.e2e.harness import ROOT, model_entry, providers_toml
from tests.support.scripted_provider import CHAT, ScriptedProvider, Usage

MITMWEB = str(Path(sys.executable).with_name("mitmweb"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mitmweb(home: Path, web_port: int) -> tuple[subprocess.Popen, int]:
    log = home / "mitmweb.log"
    args = [MITMWEB, "-s", str(ROOT / "addon" / "cursor_byok.py"), "--no-web-open-browser",
            "--listen-host", "127.0.0.1", "--listen-port", "0", "--web-host", "127.0.0.1",
            "--web-port", str(web_port), "--set", f"confdir={home / 'mitm'}",
            "--set", f"byok_db={home / 'byok.db'}", "--set", f"byok_config={home / 'providers.toml'}"]
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        listen = re.search(r"proxy listening at 127\.0\.0\.1:(\d+)", text)
        if listen and "cursor-byok ready" in text:
            return process, int(listen.group(1))
        if process.poll() is not None:
            raise RuntimeError(f"mitmweb exited:\n{text}")
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"mitmweb not ready:\n{log.read_text(errors='replace')}")


async def drive_turn(proxy_port: int, ca: Path, model: str, workspace: Path) -> str:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.md").write_text("# Notes\n\nThe build runs with `make test`.\n")
    executor = LocalExecutor(workspace)
    async with CursorClient(f"http://127.0.0.1:{proxy_port}", str(ca), on_exec=executor.on_exec) as client:
        request = user_turn_request("How do I run the tests? Check notes.md.", model_id=model,
                                    workspace=str(workspace))
        result = await client.run(request, on_frame=executor.on_frame)
    await executor.aclose()
    assert result.end_error is None, result.end_error
    return result.request_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "docs" / "img" / "mitmweb-runsse.png"))
    parser.add_argument("--flow", choices=("runsse", "append"), default="runsse")
    parser.add_argument("--size", default="1400,900")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs Debian's chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="byok-shot-") as tmp, ScriptedProvider() as provider:
        home = Path(tmp)
        entry = model_entry(provider.base_url, kind="openai_chat", model_id="deepseek-chat", name="deepseek",
                            display_name="DeepSeek Chat (BYOK)")
        (home / "providers.toml").write_text(providers_toml([entry]))
        provider.enqueue("openai_chat",
                         CHAT.tool_calls([("call_read_1", "Read", '{"path": "notes.md"}')],
                                         text="Let me look at the notes.", usage=Usage(2400, 18)),
                         CHAT.text_reply("Run `make test` from the repository root.", usage=Usage(2480, 12)))
        web_port = free_port()
        process, proxy_port = start_mitmweb(home, web_port)
        try:
            model = public_model_id(entry["base_url"], entry["kind"], entry["model_id"])
            asyncio.run(drive_turn(proxy_port, home / "mitm" / "mitmproxy-ca-cert.pem", model, home / "project"))
            time.sleep(0.5)
            flows = httpx.get(f"http://127.0.0.1:{web_port}/flows", trust_env=False).json()
            wanted = "/agent.v1.AgentService/RunSSE" if args.flow == "runsse" else "/aiserver.v1.BidiService/BidiAppend"
            flow = next(f for f in flows if f["request"]["path"] == wanted)
            url = f"http://127.0.0.1:{web_port}/#/flows/{flow['id']}/{'response' if args.flow == 'runsse' else 'request'}"
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                            f"--user-data-dir={home / 'chromium'}", f"--window-size={args.size}",
                            "--virtual-time-budget=5000", f"--screenshot={args.out}", url],
                           check=True, capture_output=True, timeout=120)
        finally:
            process.terminate()
            process.wait(15)
    if shutil.which("pngquant"):  # palette PNG: a third of the size, same look (Debian package pngquant)
        subprocess.run(["pngquant", "--quality", "60-85", "--speed", "1", "--force", "--output", args.out, args.out],
                       check=True)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size:,} bytes) from {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
