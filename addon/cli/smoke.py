"""`cursor-byok smoke`: one real agent turn through a running proxy, without Cursor.

The Cursor-like client (`client.py`) opens RunSSE + BidiAppend through the proxy over HTTPS, trusting
the CA in mitmproxy's confdir, asks one of the configured models to use Write, Read and Shell in a
fresh temporary workspace (executed here by `executor.LocalExecutor`, as Cursor would), and prints
every frame as it arrives. Success means the providers file, the proxy, the CA and the provider all
work; what fails first is named with its fix.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from dataclasses import dataclass

from rich.text import Text

from .common import CREDENTIALS_FIX, console, default_config, default_confdir, default_proxy, fail, shown_proxy
from .output import facts, heading, line

TOOLS_PROMPT = (
    "This is a connectivity check of a coding agent. Do exactly these steps with your tools, then stop: "
    "1) Write the file smoke.txt containing the single line: cursor-byok smoke ok "
    "2) Read smoke.txt back. "
    "3) Run the shell command `ls` in the workspace. "
    "Then answer with one short sentence saying what the file contains."
)
TEXT_PROMPT = "This is a connectivity check. Answer with one short sentence: which model are you?"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "smoke", help="run one real agent turn through the running proxy against your model (no Cursor needed)",
        description="Drive one agent turn like Cursor does (RunSSE + BidiAppend through the proxy, over HTTPS "
                    "with mitmproxy's CA) on one of your models, executing Write/Read/Shell in a temporary "
                    "workspace, and print the frames as they arrive.")
    p.add_argument("--proxy", default=None, help="the running proxy (default http://127.0.0.1:8080)")
    p.add_argument("--confdir", type=Path, default=None, help="mitmproxy confdir with the CA (default ~/.mitmproxy)")
    p.add_argument("--config", type=Path, default=None, help="providers file (default ~/.cursor-byok/providers.toml)")
    p.add_argument("--model", default=None,
                   help="public id, model id or display name of the model to use (default: the first one)")
    p.add_argument("--prompt", default=None, help="what to ask (default: a Write/Read/Shell exercise)")
    p.add_argument("--text-only", action="store_true", help="ask for a plain answer, no tools")
    p.add_argument("--mode", choices=("agent", "ask", "plan"), default="agent", help="agent mode (default agent)")
    p.add_argument("--workspace", type=Path, default=None,
                   help="run the tools in this folder (default: a new temporary folder, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the temporary workspace")
    p.add_argument("--host", default="api2.cursor.sh", help="Cursor backend host to address (default api2.cursor.sh)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before giving up (default 300)")
    p.add_argument("--quiet-deltas", action="store_true", help="do not print one line per text/thinking delta")
    p.add_argument("--append-form", choices=("data", "data_binary"), default="data",
                   help="how BidiAppends carry the message: hex `data` (default) or raw `data_binary`, as newer "
                        "Cursor clients send it")
    p.add_argument("--gzip-appends", action="store_true", help="send BidiAppend bodies gzip-compressed")
    p.add_argument("--http2", action="store_true",
                   help="run the turn as Cursor does by default: one HTTP/2 AgentService/Run stream "
                        "(to agentn.api5.cursor.sh unless --host names another) instead of RunSSE + BidiAppend")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class SmokeModel:
    public_id: str
    provider: str
    kind: str
    model_id: str
    display_name: str

    @classmethod
    def of(cls, m) -> "SmokeModel":
        if isinstance(m, dict):
            return cls(str(m.get("public_id")), str(m.get("provider")), str(m.get("kind")), str(m.get("model_id")),
                       str(m.get("display_name")))
        return cls(m.public_id, m.provider, m.kind, m.model_id, m.display_name)

    def matches(self, wanted: str) -> bool:
        return wanted in (self.public_id, self.model_id, self.display_name)

    def label(self) -> str:
        return f"{self.display_name} [{self.public_id}]"


def _local_models(config_path: Path) -> tuple[list[SmokeModel], str | None]:
    """The models of the providers file as this shell reads it, or why there are none."""
    from byok.providers.config import ConfigFileError, load_providers

    if not config_path.exists():
        return [], f"no providers file at {config_path}: write one (docs/providers.md) or pass --config"
    try:
        config = load_providers(config_path)
    except ConfigFileError as e:
        return [], str(e)
    if not config.models:
        return [], f"{config_path} defines no models"
    return [SmokeModel.of(m) for m in config.models], None


def pick_model(config_path: Path, wanted: str | None, served: dict | None = None) -> tuple[SmokeModel, list[str]]:
    """The model to run and notes worth printing; raises ValueError saying plainly why there is none.

    When the proxy answers its status, its own models decide (the proxy keeps the last good config
    over a broken file, and a model only in this shell's file would go upstream, not to the user's
    provider); otherwise this shell's providers file."""
    local, local_error = _local_models(config_path)
    notes: list[str] = []
    if served is None:
        if local_error:
            raise ValueError(local_error)
        notes.append("the proxy did not say which models it serves (not running, or an older cursor-byok): "
                     f"using {config_path}")
        chosen = local[0] if wanted is None else next((m for m in local if m.matches(wanted)), None)
        if chosen is None:
            raise ValueError(f"no model {wanted!r} in {config_path}; there are: "
                             + ", ".join(m.label() for m in local))
        return chosen, notes
    config = served.get("config") or {}
    listed = [m for m in config.get("models") or [] if isinstance(m, dict)]
    # with a team file, only the models it gives this user (the proxy says, for the credentials smoke sent)
    models = [SmokeModel.of(m) for m in listed if m.get("allowed", True)]
    denied = [SmokeModel.of(m) for m in listed if not m.get("allowed", True)]
    proxy_file = config.get("path") or "its providers file"
    who = f"user {served['user']}" if served.get("user") else "this client (no proxyauth user)"
    if denied and wanted is not None and any(m.matches(wanted) for m in denied):
        raise ValueError(f"the team file does not give {who} the model {wanted!r}; it may use: "
                         + (", ".join(m.label() for m in models) or "none"))
    if denied and not models:
        raise ValueError(f"the team file gives {who} none of the proxy's models ({', '.join(m.label() for m in denied)})"
                         "; smoke with the credentials of a user who has one (--proxy http://USER:PASSWORD@...)")
    if config.get("error"):
        notes.append(f"the running proxy's providers file has an error: {config['error']}; "
                     + ("it keeps serving its last good config" if models else "it serves no user models"))
    if local_error and models and local_error != config.get("error"):  # the same file's error is said once
        notes.append(f"{local_error} (smoke uses what the running proxy serves)")
    if not models:
        raise ValueError(f"the running proxy serves no models of yours ({proxy_file}"
                         + (f": {config['error']}" if config.get("error") else "") + "); fix that file "
                         "(cursor-byok doctor), the proxy picks up the change within seconds")
    if wanted is None:
        return models[0], notes
    chosen = next((m for m in models if m.matches(wanted)), None)
    if chosen is not None:
        return chosen, notes
    here = next((m for m in local if m.matches(wanted)), None)
    if here is not None:
        raise ValueError(
            f"the running proxy does not have the model {here.label()}: it serves {proxy_file}, which differs "
            f"from {config_path}. A run on it would go to Cursor's backend, not to {here.provider}. Fix: add the "
            f"model to {proxy_file} (reloaded within seconds), or restart the proxy with "
            f"--set byok_config={config_path}. It serves: " + ", ".join(m.label() for m in models))
    raise ValueError(f"the running proxy has no model {wanted!r}; it serves: " + ", ".join(m.label() for m in models))


def run(args: argparse.Namespace) -> int:
    from .common import ask_proxy

    config = args.config or default_config()
    proxy = args.proxy or default_proxy()
    answer = ask_proxy(proxy, timeout=5.0)
    if answer.needs_credentials:
        given = " (the ones given were refused)" if "@" in proxy else ""
        return fail(f"{shown_proxy(proxy)} requires proxy authentication{given}: {CREDENTIALS_FIX}", 1)
    served = answer.data
    try:
        route, notes = pick_model(config, args.model, served)
    except ValueError as e:
        return fail(str(e), 1)
    for note in notes:
        line(console(stderr=True), ("note: ", "yellow"), note)
    confdir = args.confdir or default_confdir()
    ca = confdir / "mitmproxy-ca-cert.pem"
    if not ca.exists():
        return fail(f"no CA at {ca}: start the proxy once (it creates the CA) or pass --confdir (cursor-byok doctor)")
    temporary = args.workspace is None
    workspace = Path(tempfile.mkdtemp(prefix="cursor-byok-smoke-")) if temporary else args.workspace.resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_smoke(args, route, str(ca), workspace, known_to_proxy=served is not None))
    finally:
        if temporary and not args.keep:
            shutil.rmtree(workspace, ignore_errors=True)
        elif temporary:
            line(console(), f"workspace kept: {workspace}")


async def _smoke(args: argparse.Namespace, route: SmokeModel, ca: str, workspace: Path, *,
                 known_to_proxy: bool) -> int:
    import httpx
    from google.protobuf.message import DecodeError

    from byok.wire import connect

    from byok.proto import agent_pb2 as apb

    from . import frames as fr
    from byok.transports.h2conn import H2Error

    from .client import CursorClient, Frame, UnexpectedAnswer, user_turn_request
    from .h2client import H2CursorClient
    from .executor import LocalExecutor, ScriptedQueries

    import uuid

    out = console()
    proxy = args.proxy or default_proxy()
    shown = shown_proxy(proxy)  # never print a password
    request_id = str(uuid.uuid4())  # known before the run, so a timeout can name it
    prompt = args.prompt or (TEXT_PROMPT if args.text_only else TOOLS_PROMPT)
    mode = {"agent": apb.AGENT_MODE_AGENT, "ask": apb.AGENT_MODE_ASK, "plan": apb.AGENT_MODE_PLAN}[args.mode]
    line(out, ("smoke", "bold"), f": {route.label()} = {route.provider}/{route.model_id} ({route.kind}) via {shown}, "
              f"workspace {workspace}, request {request_id}")
    executor = LocalExecutor(workspace)
    t0 = time.monotonic()
    streaming = {"text": 0}

    def on_frame(frame) -> None:
        executor.on_frame(frame)
        kind = frame.kind
        if args.quiet_deltas and kind in ("interaction_update.text_delta", "interaction_update.thinking_delta"):
            streaming["text"] += 1
            return
        text = Text(f"{time.monotonic() - t0:7.2f}s ", style="dim")
        text.append("↓ " if frame.direction == "down" else "↑ ")
        text.append(f"{kind:<40} ", style="red" if kind == "end_stream" and frame.message else
                    "dim" if kind in fr.HEARTBEAT_KINDS else "cyan")
        text.append(fr.describe(frame.direction, _end_json(frame) if kind == "end_stream" else frame.message,
                                frame.flags, limit=100))
        line(out, text)

    class PrintingClient(CursorClient):
        """The Cursor-like client, also printing each append (an up frame) as it is sent."""

        async def append(self, request_id, message, *, seqno=None, body=None):
            if body is None:
                on_frame(Frame("up", time.monotonic(), message, seqno=seqno))
            return await super().append(request_id, message, seqno=seqno, body=body)

    class PrintingH2Client(H2CursorClient):
        """The HTTP/2 Cursor-like client, also printing each message it puts on the Run stream."""

        async def send(self, request_id, message, *, raw=None):
            if raw is None:
                on_frame(Frame("up", time.monotonic(), message))
            return await super().send(request_id, message, raw=raw)

    rpc = "Run" if args.http2 else "RunSSE"
    if args.http2:
        host = args.host if args.host != "api2.cursor.sh" else "agentn.api5.cursor.sh"
        client = PrintingH2Client(proxy, ca, base_url=f"https://{host}", on_exec=executor.on_exec,
                                  on_query=ScriptedQueries().on_query, timeout_s=args.timeout)
    else:
        client = PrintingClient(proxy, ca, base_url=f"https://{args.host}", on_exec=executor.on_exec,
                                on_query=ScriptedQueries().on_query, timeout_s=args.timeout,
                                append_form=args.append_form, gzip_appends=args.gzip_appends)
    request = user_turn_request(prompt, model_id=route.public_id, mode=mode, workspace=str(workspace))
    try:
        async with client:
            result = await asyncio.wait_for(client.run(request, request_id=request_id, on_frame=on_frame), args.timeout)
    except httpx.ProxyError as e:
        if "407" in str(e):
            return fail(f"{shown} requires proxy authentication: {CREDENTIALS_FIX}", 1)
        return fail(f"the proxy refused the connection ({e}): is {shown} a mitmproxy? (cursor-byok doctor)", 1)
    except httpx.ConnectError as e:
        text = str(e)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower():
            return fail(f"TLS: the proxy's certificate is not signed by {ca} ({text}); the proxy runs with another "
                        "confdir? (cursor-byok doctor)", 1)
        return fail(f"cannot reach the proxy at {shown}: {text or type(e).__name__}; is mitmdump running? "
                    "(cursor-byok doctor)", 1)
    except asyncio.TimeoutError:
        return fail(f"no end of the turn after {args.timeout:g} s (request {request_id}); what the proxy did with "
                    f"it: cursor-byok trace {request_id}", 1)
    except UnexpectedAnswer as e:
        if known_to_proxy:
            return fail(f"the proxy answered {rpc} with HTTP {e.status} instead of a Connect stream: {e.excerpt}", 1)
        return fail(f"the proxy answered {rpc} with HTTP {e.status} instead of a Connect stream ({e.excerpt}). "
                    f"The running proxy most likely does not have the model {route.label()}: its providers file "
                    f"differs from {args.config or default_config()}, so the run went to Cursor's backend. Fix: "
                    "make the proxy's providers file (--set byok_config=...) hold this model, or pick one it "
                    "serves (cursor-byok doctor)", 1)
    except httpx.HTTPError as e:
        return fail(f"HTTP error talking to the proxy: {type(e).__name__}: {e}", 1)
    except (H2Error, OSError) as e:
        return fail(f"HTTP/2 Run through {shown} failed: {type(e).__name__}: {e} (cursor-byok doctor)", 1)
    except (connect.ConnectError, DecodeError, AssertionError) as e:
        return fail(f"the proxy's {rpc} answer broke the Connect protocol: {e}", 1)
    finally:
        await executor.aclose()
    return _summary(out, result, executor, workspace, streaming["text"])


def _end_json(frame) -> dict:
    error = frame.message
    return {} if error is None else {"error": error.to_json()}


def _summary(out, result, executor, workspace: Path, hidden_deltas: int) -> int:
    from byok.proto import aiserver_pb2 as spb

    ended = result.down("interaction_update.turn_ended")
    rows: list[tuple[str, object]] = [
        ("request", result.request_id),
        ("frames", f"{sum(f.direction == 'down' for f in result.frames)} down, "
                   f"{sum(f.direction == 'up' for f in result.frames)} up"
                   + (f" ({hidden_deltas} deltas not printed)" if hidden_deltas else "")),
        ("tools run here", ", ".join(m.WhichOneof("message") for m in executor.log) or "none"),
    ]
    files = sorted(p.name for p in workspace.iterdir() if not p.name.startswith("."))
    rows.append(("workspace files", ", ".join(files) or "none"))
    if ended:
        u = ended[-1].message.interaction_update.turn_ended
        rows.append(("usage", " ".join(f"{f}={getattr(u, f)}" for f in ("input_tokens", "output_tokens",
                                                                         "cache_read_tokens", "cache_write_tokens")
                                       if u.HasField(f)) or "not reported"))
    rows.append(("answer", (result.text() or "(no text)").replace("\n", " ")))
    heading(out, "result")
    facts(out, rows)
    if result.end_error is not None:
        detail = ""
        for d in result.end_error.details:
            if d.type == "aiserver.v1.ErrorDetails":
                detail = spb.ErrorDetails.FromString(d.value).details.detail
        line(out, ("FAILED", "bold red"), f" {result.end_error.code.value}: {result.end_error.message}")
        if detail and detail not in result.end_error.message:
            line(out, f"  {detail}")
        line(out, f"  more: cursor-byok trace {result.request_id}")
        return 1
    if result.status != 200:
        line(out, ("FAILED", "bold red"), f" RunSSE answered HTTP {result.status}")
        return 1
    if not ended:
        line(out, ("ended without turn_ended", "bold yellow"), " (was the run answered upstream?)")
        return 1
    line(out, ("OK", "bold green"), ": provider config, proxy, CA and the agent turn work")
    return 0
