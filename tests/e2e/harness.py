"""End-to-end harness: a real `mitmdump -s addon/cursor_byok.py` subprocess on a free loopback port,
with its own confdir (fresh CA), database and providers file. Nothing touches `~`. With
`binary="mitmweb"` the same proxy runs headless under mitmweb, its REST API on `web_url`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from byok.providers.config import public_model_id
from byok.cli.client import CursorClient, RunResult, user_turn_request
from byok.cli.executor import LocalExecutor
from byok.cli.h2client import H2CursorClient
from tests.support.scripted_provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[2]
MITMDUMP = str(Path(sys.executable).with_name("mitmdump"))
API_KEY = "sk-test-SECRET-abcdef0123456789"


def providers_toml(models: list[dict]) -> str:
    """models: [{name, kind, base_url, model_id, extra...}] -> TOML text."""
    out = []
    for m in models:
        out += [
            "[[providers]]",
            f'name = "{m["name"]}"',
            f'kind = "{m["kind"]}"',
            f'base_url = "{m["base_url"]}"',
            f'api_key = "{m.get("api_key", API_KEY)}"',
            *(f"{key} = {value}" for key, value in m.get("provider_extra", {}).items()),
            "[[providers.models]]",
            f'id = "{m["model_id"]}"',
            f'display_name = "{m.get("display_name", m["model_id"] + " (BYOK)")}"',
        ]
        if m.get("context_tokens", 128000) is not None:  # None: a model without a known window
            out.append(f'context_tokens = {m.get("context_tokens", 128000)}')
        for key, value in m.get("extra", {}).items():
            out.append(f"{key} = {value}")
        out.append("")
    return "\n".join(out)


WEB_TOKEN = "byok-test-web-token"
"""mitmweb 12 wants a token on every API call (`Authorization: Bearer`); the tests set their own."""


@dataclass
class Proxy:
    home: Path
    options: dict = field(default_factory=dict)
    extra_scripts: list[str] = field(default_factory=list)
    pre_scripts: list[str] = field(default_factory=list)
    """Test scripts loaded before the addon (they may prepare `byok` modules before it imports them)."""
    extra_args: list[str] = field(default_factory=list)
    """More mitmdump arguments, e.g. ["--mode", "regular", "--mode", "reverse:https://host@PORT"]."""
    binary: str = "mitmdump"
    """mitmdump, or mitmweb (no browser; web UI and REST API on 127.0.0.1:web_port)."""
    listen_host: str | None = "127.0.0.1"
    """--listen-host; None leaves it to the addon (its loopback default)."""
    host: str = "127.0.0.1"
    """The address the proxy reported it listens on."""
    process: subprocess.Popen | None = None
    port: int = 0
    web_port: int = 0
    stream_port: int = 0
    ready_s: float = 0.0

    @property
    def confdir(self) -> Path:
        return self.home / "mitm"

    @property
    def ca_file(self) -> str:
        return str(self.confdir / "mitmproxy-ca-cert.pem")

    @property
    def db(self) -> Path:
        return Path(self.options.get("byok_db", self.home / "byok.db"))

    @property
    def config(self) -> Path:
        return Path(self.options.get("byok_config", self.home / "providers.toml"))

    @property
    def log_path(self) -> Path:
        return self.home / "mitmdump.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 30.0) -> "Proxy":
        self.home.mkdir(parents=True, exist_ok=True)
        opts = {"byok_db": str(self.db), "byok_config": str(self.config), **self.options}
        args = [str(Path(MITMDUMP).with_name(self.binary))]
        for script in self.pre_scripts:
            args += ["-s", script]
        args += ["-s", str(ROOT / "addon" / "cursor_byok.py")]
        for script in self.extra_scripts:
            args += ["-s", script]
        if self.listen_host is not None:
            args += ["--listen-host", self.listen_host]
        args += ["--listen-port", "0", "--set", f"confdir={self.confdir}", *self.extra_args]
        if self.binary == "mitmweb":
            self.web_port = self.web_port or free_port()
            opts = {"web_open_browser": "false", "web_host": "127.0.0.1", "web_port": self.web_port,
                    "web_password": WEB_TOKEN, **opts}
        for key, value in opts.items():
            args += ["--set", f"{key}={value}"]
        log = open(self.log_path, "ab")
        t0 = time.monotonic()
        env = without_proxy_env(os.environ)
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        offset = len(self.log())
        while time.monotonic() - t0 < timeout:
            text = self.log()[offset:] if offset <= len(self.log()) else self.log()
            listen = re.search(r"proxy listening at ([\d.]+):(\d+)", text)
            ready = re.search(r"cursor-byok ready: .* stream server 127\.0\.0\.1:(\d+)", text)
            web = self.binary != "mitmweb" or re.search(r"Web server listening at http://127\.0\.0\.1:\d+/", text)
            if listen and ready and web:
                self.host, self.port, self.stream_port = listen.group(1), int(listen.group(2)), int(ready.group(1))
                self.ready_s = time.monotonic() - t0
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self.process.returncode}:\n{self.log()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.binary} not ready after {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 15.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        code = self.process.returncode
        self.process = None
        return code

    def kill9(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
            self.process = None

    def client(self, **kwargs) -> CursorClient:
        return CursorClient(self.url, self.ca_file, **kwargs)

    def h2_client(self, **kwargs) -> H2CursorClient:
        """The HTTP/2 Run client (Cursor's default transport) through this proxy."""
        return H2CursorClient(self.url, self.ca_file, **kwargs)


@dataclass
class ProxyEnv:
    """What a test module shares: its proxy, its scripted provider and the public model id per kind."""
    proxy: Proxy
    provider: ScriptedProvider
    models: dict[str, str]


async def newer_turn_while_streaming(older: CursorClient, newer: CursorClient, model: str):
    """A turn ("first") on `older`; once its first text delta arrives, a second turn ("second") in the
    same conversation on `newer` (the same client, or one on another replica). Returns both results,
    the older first."""
    first = user_turn_request("first", model_id=model)
    streaming = asyncio.Event()

    async def on_frame(frame):
        if frame.kind == "interaction_update.text_delta":
            streaming.set()

    task = asyncio.ensure_future(older.run(first, on_frame=on_frame))
    await streaming.wait()
    second = user_turn_request("second", model_id=model, conversation_id=first.conversation_id)
    result = await newer.run(second)
    return await task, result


def run_with_executor(proxy: Proxy, request, workspace: Path, *, h2: bool = False,
                      **client_kwargs) -> tuple[RunResult, list]:
    """Run `request` through `proxy` (RunSSE; HTTP/2 Run with `h2`) as the IDE would, a LocalExecutor
    serving its execs in `workspace`. Returns the result and the exec messages the executor ran."""

    async def scenario():
        executor = LocalExecutor(workspace)
        async with (proxy.h2_client if h2 else proxy.client)(on_exec=executor.on_exec, **client_kwargs) as client:
            try:
                result = await client.run(request, on_frame=executor.on_frame)
            finally:
                await executor.aclose()
        return result, executor.log

    return asyncio.run(scenario())


def stage_then_leave(proxy: Proxy, request, leave, *, h2: bool = False,
                     request_id: str | None = None) -> tuple[object, dict[bytes, bytes]]:
    """Run `request` with a client that never runs the tools; at each checkpoint with a staged tool
    round, `leave(client)` (kill the proxy, reset the stream). Returns the first staged checkpoint and
    the client's blobs: what an IDE holds to resume the run elsewhere."""

    async def scenario():
        staged: list = []

        async def never_answer(client, message):
            return None

        async with (proxy.h2_client if h2 else proxy.client)(on_exec=never_answer) as client:
            async def on_frame(frame):
                if frame.kind == "conversation_checkpoint_update" and \
                        frame.message.conversation_checkpoint_update.pending_tool_calls:
                    staged.append(frame.message.conversation_checkpoint_update)
                    leave(client)

            try:
                await client.run(request, request_id=request_id, on_frame=on_frame)
            except Exception:
                pass  # the stream dies as the client leaves
            return staged[0], dict(client.blobs)

    return asyncio.run(scenario())


def without_proxy_env(environ) -> dict[str, str]:
    """The environment for a mitmdump under test: no proxy variables (traffic stays on loopback), and
    bytecode caching on as on a user's machine (PYTHONDONTWRITEBYTECODE would recompile every module
    at every start)."""
    return {k: v for k, v in environ.items()
            if not k.lower().endswith("_proxy") and k != "PYTHONDONTWRITEBYTECODE"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_entry(base_url: str, *, kind: str = "openai_chat", model_id: str = "test-model", name: str = "scripted",
                **extra) -> dict:
    entry = {"name": name, "kind": kind, "base_url": base_url, "model_id": model_id}
    entry.update(extra)
    return entry


def public_id(entry: dict) -> str:
    return public_model_id(entry["base_url"], entry["kind"], entry["model_id"])


WEB_TOOLS = ("WebSearch", "GenerateImage")
"""Offered only when the providers file has [web_search] / [image_generation]."""


def mode_tools(mode: str, *, web_configured: bool = False) -> list[str]:
    """A mode's tools in manifest order (prompt/modes/<mode>.json), as the proxy offers them: unless
    `web_configured`, without WEB_TOOLS."""
    tools = json.loads((ROOT / "prompt" / "modes" / f"{mode}.json").read_text())
    return tools if web_configured else [t for t in tools if t not in WEB_TOOLS]
