"""The CLI tells the truth, readable everywhere: ids, model names and errors stay whole on one line in
pipes at widths 60 and 200 and on a terminal (a pty), nothing anybody wrote is read as markup, `--json`
parses, `trace` shows tool arguments from the stored message shape, and smoke/doctor say what the
running proxy really does."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from byok.cli import main
from byok.cli.output import line, make_console

CLI = str(Path(sys.executable).with_name("cursor-byok"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") and not k.lower().endswith("_proxy")}
    env.update(extra)
    return env


def piped(args: list[str], width: int) -> str:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60, env=cli_env(COLUMNS=str(width)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def on_tty(args: list[str], width: int) -> str:
    """Run the CLI on a pseudo-terminal of `width` columns (no COLUMNS: rich asks the terminal)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    process = subprocess.Popen([CLI, *args], stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                               env=cli_env(TERM="xterm-256color"), start_new_session=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        os.close(master)
    raw = b"".join(chunks).decode("utf-8", errors="replace")
    assert "\x1b[" in raw  # a terminal gets styles, so this really took the TTY path
    return ANSI.sub("", raw).replace("\r\n", "\n")


def whole_on_a_line(text: str, *needles: str) -> None:
    lines = text.splitlines()
    for needle in needles:
        assert any(needle in ln for ln in lines), f"{needle!r} is not whole on any line of:\n{text}"


WAYS = [("pipe", 60), ("pipe", 200), ("tty", 60), ("tty", 200)]


def output(way: str, width: int, args: list[str]) -> str:
    return piped(args, width) if way == "pipe" else on_tty(args, width)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("way, width", WAYS)
def test_trace_keeps_ids_models_and_errors_whole(built, way, width):
    out = output(way, width, ["trace", built.conversation_id, "--db", str(built.db)])
    whole_on_a_line(out, built.request_ok, built.request_failed, built.model_call_tool, built.model_call_failed,
                    built.tool_call_id, built.tool_round_id, "deepseek / deepseek-chat (openai_chat)",
                    "unavailable: provider error: HTTP 529", "HTTP 529 from provider: overloaded",
                    '{"path":"' + str(built.home) + '/project/a.py"}')
    if width == 60:  # nothing fits a table at 60: records, one value per line
        assert "• call 0" in out and "│" not in out.split("frames (")[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("way, width", WAYS)
def test_usage_keeps_days_and_models_whole(built, way, width):
    out = output(way, width, ["usage", "--db", str(built.db)])
    whole_on_a_line(out, "2026-01-02", "2026-01-03", "deepseek/deepseek-chat", "anthropic/claude-x", "2,200")
    day_rows = [ln for ln in out.splitlines() if "2026-01-02" in ln]
    assert any("deepseek/deepseek-chat" in ln for ln in day_rows)  # each row says which day AND which model


def test_narrow_tables_become_key_value_records(built):
    out = piped(["trace", built.request_ok, "--db", str(built.db)], 60)
    assert "• call 0" in out and "model_call_id     model-call-tool-1" in out
    wide = piped(["trace", built.request_ok, "--db", str(built.db)], 200)
    assert "• call 0" not in wide and "model_call_id" in wide.splitlines()[next(
        i for i, ln in enumerate(wide.splitlines()) if ln == "provider calls") + 1]


def test_trace_and_usage_json(built, capsys):
    assert main(["trace", built.tool_call_id, "--db", str(built.db), "--json", "--frames", "all"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert story["kind"] == "tool_call" and story["id"] == built.tool_call_id
    run = story["runs"][0]
    assert run["request_id"] == built.request_ok and run["run"]["status"] == "completed"
    assert [c["model_call_id"] for c in run["provider_calls"]] == [built.model_call_tool, built.model_call_ok]
    tool = run["tool_calls"][0]
    assert tool["call_id"] == built.tool_call_id and json.loads(tool["arguments"]) == {
        "path": f"{built.home}/project/a.py"}
    assert tool["result"] == "print('hi')\n" and tool["status"] == "ok"
    assert [f["kind"] for f in run["frames"]["list"]][:2] == ["run_request", "kv_client_message.set_blob_result"]
    assert main(["usage", "--db", str(built.db), "--json"]) == 0
    usage = json.loads(capsys.readouterr().out)
    assert usage["totals"]["input_tokens"] == 2200 and usage["totals"]["calls"] == 3
    assert [(r["day"], r["model"]) for r in usage["rows"]] == [
        ("2026-01-02", "deepseek/deepseek-chat"), ("2026-01-03", "anthropic/claude-x")]
    assert main(["trace", "nope-nope", "--db", str(built.db), "--json"]) == 1
    assert "is not a request" in json.loads(capsys.readouterr().out)["error"]


def test_trace_reads_tool_arguments_from_the_staged_message_shape(tmp_path):
    from byok.dashboard.queries import tool_arguments

    staged = json.dumps({"role": "assistant", "content": [
        {"type": "text", "text": "x"},
        {"type": "tool-call", "toolCallId": "c1", "toolName": "Read", "input": {"path": "a.py"}},
        {"type": "tool-call", "toolCallId": "c2\nwith newline", "toolName": "Shell", "input": "not json"}]})
    assert tool_arguments(staged) == {"c1": '{"path":"a.py"}', "c2\nwith newline": "not json"}
    legacy = json.dumps({"tool_calls": [{"call_id": "c3", "arguments": '{"x":1}'}]})
    assert tool_arguments(legacy) == {"c3": '{"x":1}'}
    assert tool_arguments("not json") == {} and tool_arguments(None) == {}


def test_nothing_written_by_users_or_providers_is_markup(capsys):
    out = make_console()
    line(out, "smoke: Mock Claude [bfac2315] = x", " [[providers]] #1 'a' [bold]b[/bold] :smile:")
    printed = capsys.readouterr().out
    assert "smoke: Mock Claude [bfac2315] = x [[providers]] #1 'a' [bold]b[/bold] :smile:" in printed


def test_a_broken_providers_file_error_prints_its_brackets(tmp_path, capsys):
    bad = tmp_path / "providers.toml"
    bad.write_text('[[providers]]\nname = "x"\nkind = "nope"\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert main(["smoke", "--config", str(bad), "--proxy", closed, "--confdir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "providers.toml:3: [[providers]] #1 'x': kind must be one of" in err


def test_smoke_explains_an_html_answer_without_a_traceback(tmp_path, capsys, monkeypatch):
    """A proxy that does not say what it serves (older, or not cursor-byok) passed the run upstream and
    answered mitmproxy's 502 page: smoke says the model is likely unknown there, and how to fix it."""
    from byok.cli import client as client_mod

    config = tmp_path / "providers.toml"
    config.write_text('[[providers]]\nname = "mock"\nkind = "anthropic"\nbase_url = "http://127.0.0.1:9/v1"\n'
                      'api_key = "sk-x"\n[[providers.models]]\nid = "claude-x"\ndisplay_name = "Mock Claude"\n'
                      'max_output_tokens = 1000\n')
    (tmp_path / "mitmproxy-ca-cert.pem").write_text("-----BEGIN CERTIFICATE-----\n")

    async def html_answer(self, request, **kwargs):
        raise client_mod.UnexpectedAnswer(502, "text/html", "502 Bad Gateway: Cannot connect to api2.cursor.sh")

    monkeypatch.setattr(client_mod.CursorClient, "run", html_answer)
    monkeypatch.setattr(client_mod.CursorClient, "__post_init__", lambda self: _no_http(self))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    code = main(["smoke", "--config", str(config), "--proxy", closed, "--confdir", str(tmp_path), "--text-only"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err
    assert "Mock Claude [" in captured.out  # the header keeps its bracketed public id
    assert "HTTP 502" in captured.err and "does not have the model Mock Claude [" in captured.err
    assert "byok_config" in captured.err


def _no_http(client) -> None:
    class Closed:
        async def aclose(self):
            return None

    client._http = Closed()
    client._seqno, client._frames, client._tasks = {}, {}, set()


@pytest.mark.timeout(20)
def test_client_reports_a_non_connect_answer_as_unexpected(tmp_path):
    """mitmproxy's 502 page read as Connect envelopes was a '1752460652 bytes' frame and a traceback."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from byok.cli.client import CursorClient, UnexpectedAnswer, user_turn_request

    class Page(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b"<html><head><title>502 Bad Gateway</title><style>p{}</style></head><body><h1>502 Bad Gateway</h1>" \
                   b"<p>Cannot connect to api2.cursor.sh</p></body></html>"
            self.send_response(502)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        async def go():
            async with CursorClient(None, base_url=f"http://127.0.0.1:{server.server_port}") as client:
                await client.run(user_turn_request("hi", model_id="abcd1234"), send_run_request=False)

        with pytest.raises(UnexpectedAnswer) as e:
            asyncio.run(go())
        assert e.value.status == 502 and e.value.content_type == "text/html"
        assert "Cannot connect to api2.cursor.sh" in e.value.excerpt and "<" not in e.value.excerpt
        assert "p{}" not in e.value.excerpt
    finally:
        server.shutdown()
        server.server_close()


def test_doctor_cannot_tell_about_a_key_variable_only_mitmdump_may_have(tmp_path, capsys):
    from byok.cli.doctor import check_providers

    config = tmp_path / "providers.toml"
    config.write_text('[[providers]]\nname = "p"\nkind = "openai_chat"\nbase_url = "https://x.example/v1"\n'
                      'api_key_env = "BYOK_UNIT_NOT_HERE_KEY"\n[[providers.models]]\nid = "m"\n')
    os.environ.pop("BYOK_UNIT_NOT_HERE_KEY", None)
    check = check_providers(config, None)
    assert check.status == "info" and "cannot ask the running proxy" in check.fix[0]
    from byok.providers.config import load_providers

    public_id = load_providers(config).models[0].public_id
    served = {"config": {"path": str(config), "error": None, "models": [
        {"public_id": public_id, "display_name": "m (BYOK)", "key_set": True}]}}
    assert check_providers(config, served).status == "ok"
    served["config"]["models"][0]["key_set"] = False
    check = check_providers(config, served)
    assert check.status == "warn" and "not set in the running proxy's environment" in check.fix[0]


def test_doctor_tells_what_a_proxy_does_with_a_broken_file(tmp_path):
    from byok.cli.doctor import check_providers

    bad = tmp_path / "providers.toml"
    bad.write_text("[[providers]]\nname = \n")
    unknown = check_providers(bad, None)
    assert unknown.status == "fail" and "keeps serving the last good config" in unknown.fix[1]
    assert "cannot tell" in unknown.fix[1]
    served = {"config": {"path": str(bad), "error": "x", "models": [{"public_id": "abcd1234", "display_name": "M"}]}}
    assert "keeps serving its last good config: 1 model(s): M [abcd1234]" in check_providers(bad, served).fix[1]
    served["config"]["models"] = []
    assert "has no user models" in check_providers(bad, served).fix[1]
