"""Tab through a real mitmdump: StreamCpp answered from the [tab] model (scripted FIM and chat
providers) over HTTP/1.1 and HTTP/2, every template, UTF-16 and CRLF files, multi-line completions,
contents_start_at_line, cancellation, provider errors, the other Tab RPCs, CppConfig kept on,
passthrough without [tab], and Cursor unreachable."""

from __future__ import annotations

import asyncio
import sqlite3
import ssl
import time

import httpx

import pytest

from byok.assist.fim import TEMPLATES
from byok.assist.tab_edit import Edit, apply_edit
from byok.proto import aiserver_pb2 as spb, cpp_pb2 as cpb
from byok.wire import connect
from tests.e2e.conftest import ROOT, run
from tests.e2e.harness import API_KEY, Proxy, free_port
from tests.support.fake_cursor import FakeCursor
from tests.support.scripted_provider import CHAT, COMPLETIONS, MISTRAL_FIM, HttpError, ScriptedProvider
from tests.support.tab_client import HOST, STREAM_CPP, TabAnswer, request, stream_cpp, unary

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90), pytest.mark.usefixtures("fresh_provider")]

CPP_CONFIG = "/aiserver.v1.AiService/CppConfig"
CPP_MODELS = "/aiserver.v1.CppService/AvailableModels"
FIM_MODELS = {"suffix": "coder", "qwen": "coder-qwen", "starcoder": "coder-starcoder",
              "codellama": "coder-codellama", "deepseek": "coder-deepseek"}
UPSTREAM_STREAM_CPP = b"".join(connect.encode_envelope(m.SerializeToString()) for m in (
    cpb.StreamCppResponse(model_info=cpb.StreamCppResponse.ModelInfo(is_fused_cursor_prediction_model=True)),
    cpb.StreamCppResponse(range_to_replace=cpb.LineRange(start_line_number=1, end_line_number_inclusive=1)),
    cpb.StreamCppResponse(text="x = cursor's own"), cpb.StreamCppResponse(done_stream=True))) + connect.encode_end_stream()
UPSTREAM_CPP_CONFIG = cpb.CppConfigResponse(is_on=False, cpp_url="https://api4.cursor.sh",
                                            client_debounce_duration_millis=60).SerializeToString() + b"\xd0\x3e\x07"


def providers_file(base_url: str, tab: str | None) -> str:
    out = ["[[providers]]", 'name = "local"', 'kind = "openai_completions"', f'base_url = "{base_url}"',
           f'api_key = "{API_KEY}"']
    for fim, model in FIM_MODELS.items():
        out += ["[[providers.models]]", f'id = "{model}"', f'fim = "{fim}"']
    out += ["", "[[providers]]", 'name = "mistral"', 'kind = "mistral_fim"', f'base_url = "{base_url}"',
            f'api_key = "{API_KEY}"', "[[providers.models]]", 'id = "codestral"',
            "", "[[providers]]", 'name = "chat"', 'kind = "openai_chat"', f'base_url = "{base_url}"',
            f'api_key = "{API_KEY}"', "[[providers.models]]", 'id = "chat-model"', ""]
    if tab is not None:
        out += ["[tab]", f'model = "{tab}"']
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def upstream():
    with FakeCursor(model_list_payloads={CPP_CONFIG: ("application/proto", UPSTREAM_CPP_CONFIG),
                                         STREAM_CPP: ("application/connect+proto", UPSTREAM_STREAM_CPP)}) as fake:
        yield fake


@pytest.fixture(scope="module")
def env(tmp_path_factory, provider, upstream):
    home = tmp_path_factory.mktemp("tab")
    (home / "providers.toml").write_text(providers_file(provider.base_url, "local/coder"))
    proxy = Proxy(home, extra_scripts=[str(ROOT / "tests/support/redirect_upstream.py")],
                  options={"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true",
                           "byok_upstream_probe_ms": "0"}).start()  # the Cursor hosts are the fake, not DNS
    yield proxy
    proxy.stop()


def use_tab(proxy: Proxy, provider: ScriptedProvider, tab: str | None) -> None:
    """Point [tab] at another model (None: no [tab]); the proxy reloads the file at the next call."""
    text = providers_file(provider.base_url, tab) + f"# {time.monotonic_ns()}\n"  # a new size/mtime each time
    proxy.config.write_text(text)


@pytest.fixture
def tab(env, provider):
    """Each test starts with [tab] on the suffix model and leaves it so."""
    use_tab(env, provider, "local/coder")
    yield
    use_tab(env, provider, "local/coder")


def call(proxy: Proxy, req: cpb.StreamCppRequest, **kwargs) -> TabAnswer:
    return run(stream_cpp(proxy.url, proxy.ca_file, req, **kwargs))


def assert_applies(answer: TabAnswer, contents: str, first_line: int, expected: str) -> Edit:
    assert answer.status == 200 and answer.content_type == "application/connect+proto"
    assert answer.ended and answer.error is None, answer.error
    kinds = answer.kinds()
    assert kinds[:3] == ["model_info", "range", "text"] and kinds[-1] == "done" and set(kinds[3:-1]) <= {"text"}
    edit = answer.edit()
    eol = "\r\n" if "\r\n" in contents else "\n"
    assert apply_edit(contents, eol, first_line, edit) == expected
    return edit


def rows(proxy: Proxy, request_id: str, *, status: str | None = None, timeout: float = 10.0) -> list[dict]:
    """The llm_calls rows of a request, once they exist (and reached `status`)."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(proxy.db) as db:
            db.row_factory = sqlite3.Row
            found = [dict(r) for r in db.execute("SELECT * FROM llm_calls WHERE request_id = ?", [request_id])]
        if found and (status is None or all(r["status"] == status for r in found)):
            return found
        assert time.monotonic() < deadline, f"llm_calls of {request_id}: {found}"
        time.sleep(0.05)


def positions(proxy: Proxy, request_id: str, timeout: float = 10.0) -> list[dict]:
    """The tab_positions rows of a request (cursor-byok verify's evidence), once written."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(proxy.db) as db:
            db.row_factory = sqlite3.Row
            found = [dict(r) for r in db.execute("SELECT * FROM tab_positions WHERE request_id = ?", [request_id])]
        if found:
            return found
        assert time.monotonic() < deadline, f"no tab_positions row for {request_id}"
        time.sleep(0.05)


CRLF_FILE = "import os\r\n\r\ndef size(path):\r\n    return os.path.\r\n\r\nprint(size('.'))\r\n"


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_stream_cpp_is_answered_from_the_fim_model(env, provider, tab, http2):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("getsize(path)", pieces=3, litellm=True))
    answer = call(env, request(CRLF_FILE, 3, 19), http2=http2, headers={"x-request-id": f"tab-{http2}"})
    assert_applies(answer, CRLF_FILE, 0, CRLF_FILE.replace("os.path.\r\n", "os.path.getsize(path)\r\n"))
    sent = provider.requests[-1]
    assert sent.path == "/v1/completions" and sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.json["prompt"].endswith("def size(path):\n    return os.path.") and "\r" not in sent.json["prompt"]
    assert sent.json["suffix"].startswith("\n\nprint(size('.'))") and sent.json["stream"] is True
    row, = rows(env, f"tab-{http2}", status="ok")
    assert row["purpose"] == "tab" and row["model"] == "coder" and row["provider_kind"] == "openai_completions"
    assert row["input_tokens"] == 100 and row["ttft_ms"] is not None
    position, = positions(env, f"tab-{http2}")
    assert (position["source"], position["cursor_line"], position["cursor_column"], position["column_fits"]) == (
        "answered", 3, 19, "ok")


@pytest.mark.parametrize("fim", ["qwen", "starcoder", "codellama", "deepseek"])
def test_each_template(env, provider, tab, fim):
    use_tab(env, provider, f"local/{FIM_MODELS[fim]}")
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("b<|endoftext|>"))
    contents = "def add(a, b):\n    return a + \n"
    answer = call(env, request(contents, 1, 15))
    assert_applies(answer, contents, 0, contents.replace("a + \n", "a + b\n"))
    body = provider.requests[-1].json
    template = TEMPLATES[fim]
    assert "suffix" not in body and body["model"] == FIM_MODELS[fim]
    assert body["prompt"] == template.render("def add(a, b):\n    return a + ", "\n")
    assert set(template.stop) <= set(body["stop"])


def test_mistral_fim(env, provider, tab):
    use_tab(env, provider, "mistral/codestral")
    provider.enqueue("mistral_fim", MISTRAL_FIM.text_reply("1, 2)"))
    contents = "total = add(\n"
    answer = call(env, request(contents, 0, 12))
    assert_applies(answer, contents, 0, "total = add(1, 2)\n")
    assert provider.requests[-1].path == "/v1/fim/completions" and provider.requests[-1].json["suffix"] == "\n"


def test_utf16_columns_emoji_and_cjk(env, provider, tab):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("世界 😀"))
    contents = "msg = '😀 名前: '\nprint(msg)\n"
    answer = call(env, request(contents, 0, 14))  # after "msg = '😀 名前: " (the emoji is 2 units)
    assert_applies(answer, contents, 0, "msg = '😀 名前: 世界 😀'\nprint(msg)\n")


def test_multi_line_completion(env, provider, tab):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("\n    if n < 2:\n        return n\n    return fib(n - 1)",
                                                                  pieces=6))
    contents = "def fib(n):\n\nprint(fib(10))\n"
    answer = call(env, request(contents, 0, 11))
    expected = "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1)\n\nprint(fib(10))\n"
    assert_applies(answer, contents, 0, expected)
    assert len([k for k in answer.kinds() if k == "text"]) >= 2  # streamed, not one piece at the end


def test_contents_start_at_line(env, provider, tab):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("42"))
    contents = "a = 1\nanswer = \nb = 2\n"
    answer = call(env, request(contents, 1, 9, contents_start_at_line=500))
    edit = assert_applies(answer, contents, 500, "a = 1\nanswer = 42\nb = 2\n")
    assert (edit.start_line, edit.end_line) == (502, 502)


def test_a_chat_model_serves_tab(env, provider, tab):
    use_tab(env, provider, "chat/chat-model")
    provider.enqueue("openai_chat", CHAT.text_reply(
        "<edit>\n\ndef size(path):\n    return os.path.getsize(path)\n\nprint(size('.'))\n</edit>", pieces=6))
    answer = call(env, request(CRLF_FILE, 3, 19), http2=True)
    edit = assert_applies(answer, CRLF_FILE, 0, CRLF_FILE.replace("os.path.\r\n", "os.path.getsize(path)\r\n"))
    assert (edit.start_line, edit.end_line) == (2, 6)
    messages = provider.requests[-1].json["messages"]
    assert "os.path.<|cursor|>" in messages[1]["content"]


def test_rely_on_filesync_without_contents_asks_for_the_file(env, tab):
    answer = call(env, request("", 0, 0, rely_on_filesync=True))
    assert answer.ended and answer.frames == [] and answer.error.code is connect.Code.NOT_FOUND
    detail = spb.ErrorDetails.FromString(answer.error.details[0].value)
    assert detail.error == spb.ErrorDetails.ERROR_FILE_NOT_FOUND


def test_provider_error_is_a_connect_error_and_no_suggestion(env, provider, tab):
    provider.enqueue("openai_completions", HttpError(500, {"error": {"message": "CUDA out of memory"}}))
    answer = call(env, request("x = \n", 0, 4))
    assert answer.ended and answer.kinds() == ["model_info"]  # no range, no text: nothing to apply
    assert answer.error.code is connect.Code.UNAVAILABLE and "CUDA out of memory" in answer.error.message
    detail = spb.ErrorDetails.FromString(answer.error.details[0].value)
    assert answer.error.details[0].type == "aiserver.v1.ErrorDetails" and detail.error == spb.ErrorDetails.ERROR_PROVIDER_ERROR


@pytest.mark.parametrize("script", ["length", "error_event"])
def test_a_failure_after_streamed_text_never_completes_the_suggestion(env, provider, tab, script):
    """Text streams as the model writes it; a cut by the token budget or a provider failure later ends
    the stream with an error and without done_stream, so the client has no complete suggestion."""
    provider.enqueue("openai_completions", COMPLETIONS.length_cutoff("1 + 2 + 3") if script == "length"
                     else COMPLETIONS.error_event("backend crashed", partial_text="1 + 2"))
    answer = call(env, request("x = \n", 0, 4))
    assert answer.ended and "done" not in answer.kinds() and answer.error.code is connect.Code.UNAVAILABLE
    assert ("token budget" if script == "length" else "backend crashed") in answer.error.message


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_a_client_abort_closes_the_provider_request_at_once(env, provider, tab, http2):
    provider.enqueue("openai_completions", COMPLETIONS.endless("y", every_s=0.05))
    before = len(provider.requests)
    answer = call(env, request("x = \n", 0, 4), http2=http2, abort_after=3, headers={"x-request-id": f"abort-{http2}"})
    aborted = time.time()
    assert answer.kinds() == ["model_info", "range", "text"]
    closed = provider.wait_closed(before + 1)
    assert closed.closed_early and closed.closed_at - aborted < 1.0
    rows(env, f"abort-{http2}", status="canceled")


def test_many_concurrent_aborts_leak_nothing(env, provider, tab):
    n = 24
    before = len(provider.requests)
    for _ in range(n):
        provider.enqueue("openai_completions", COMPLETIONS.endless("z", every_s=0.05))

    async def many():
        return await asyncio.gather(*(stream_cpp(env.url, env.ca_file, request("x = \n", 0, 4), http2=i % 2 == 0,
                                                 abort_after=3, headers={"x-request-id": f"many-{i}"})
                                      for i in range(n)))

    answers = run(many())
    assert all(a.kinds() == ["model_info", "range", "text"] for a in answers)
    for i in range(n):
        assert provider.wait_closed(before + i + 1).closed_early
        rows(env, f"many-{i}", status="canceled")
    # nothing left behind: a new call is answered as usual, and the proxy logged no stray task errors
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("1"))
    assert call(env, request("x = \n", 0, 4)).edit().text == "x = 1"
    log = env.log()
    assert "Task was destroyed" not in log and "Traceback" not in log and "never retrieved" not in log


def test_the_other_tab_rpcs_are_answered_locally(env, upstream, tab):
    seen = len(upstream.seen)

    async def calls():
        fate = await unary(env.url, env.ca_file, "/aiserver.v1.CppService/RecordCppFate",
                           cpb.RecordCppFateRequest(request_id="r", fate=cpb.CPP_FATE_ACCEPT))
        status = await unary(env.url, env.ca_file, "/aiserver.v1.AiService/CppEditHistoryStatus",
                             cpb.CppEditHistoryStatusRequest(), json_codec=True)
        models = await unary(env.url, env.ca_file, CPP_MODELS, cpb.AvailableCppModelsRequest())
        refresh = await unary(env.url, env.ca_file, "/aiserver.v1.AiService/RefreshTabContext",
                              cpb.RefreshTabContextRequest())
        return fate, status, models, refresh

    fate, status, models, refresh = run(calls())
    assert fate.status_code == 200 and fate.content == b""
    assert status.json() == {} or status.json().get("on") in (None, False)
    assert cpb.AvailableCppModelsResponse.FromString(models.content).default_model == "local/coder"
    assert refresh.status_code == 200 and refresh.headers["content-type"] == "application/proto"
    async def prediction():
        async with httpx.AsyncClient(proxy=env.url, verify=ssl.create_default_context(cafile=env.ca_file),
                                     trust_env=False) as client:
            return await client.post(f"https://{HOST}/aiserver.v1.AiService/StreamNextCursorPrediction",
                                     content=connect.encode_envelope(cpb.StreamNextCursorPredictionRequest().SerializeToString()),
                                     headers={"content-type": "application/connect+proto"})

    answer = run(prediction())
    frames = connect.decode_all(answer.content)
    assert len(frames) == 1 and frames[0].end_stream and connect.parse_end_stream(frames[0].payload) is None
    assert len(upstream.seen) == seen  # none of them reached Cursor


def test_cpp_config_is_kept_on_with_every_other_byte(env, upstream, tab):
    answer = run(unary(env.url, env.ca_file, CPP_CONFIG, cpb.CppConfigRequest(model="fast")))
    config = cpb.CppConfigResponse.FromString(answer.content)
    assert config.is_on and config.should_let_user_enable_cpp_even_if_not_pro
    assert config.cpp_url == "https://api4.cursor.sh" and config.client_debounce_duration_millis == 60
    assert b"\xd0\x3e\x07" in answer.content
    assert upstream.requests(CPP_CONFIG)[-1].body == cpb.CppConfigRequest(model="fast").SerializeToString()


def test_without_tab_everything_passes_upstream_byte_for_byte(env, provider, upstream, tab):
    use_tab(env, provider, None)
    req = request("x = \n", 0, 4)
    before = len(provider.requests)
    answer = call(env, req, host="api4.cursor.sh")
    assert answer.raw == UPSTREAM_STREAM_CPP and answer.edit().text == "x = cursor's own"
    assert upstream.requests(STREAM_CPP)[-1].body == connect.encode_envelope(req.SerializeToString())
    # over HTTP/2 too (the fake Cursor speaks HTTP/1.1 only: a bare mitmdump would forward this h2 request
    # without a length header, so only the answer is compared here)
    assert call(env, req, host="api4.cursor.sh", http2=True).raw == UPSTREAM_STREAM_CPP
    config = run(unary(env.url, env.ca_file, CPP_CONFIG, cpb.CppConfigRequest()))
    assert config.content == UPSTREAM_CPP_CONFIG
    fate = run(unary(env.url, env.ca_file, "/aiserver.v1.CppService/RecordCppFate", cpb.RecordCppFateRequest()))
    assert fate.content == b"upstream ok"
    assert len(provider.requests) == before


def test_tab_works_with_cursor_unreachable(tmp_path, provider):
    """A reverse-mode listener whose Cursor is a closed loopback port: the upstream probe finds it down
    (the test stays on loopback), and every Tab call is still answered."""
    closed, port = free_port(), free_port()  # nothing listens on `closed`: Cursor is down
    (tmp_path / "providers.toml").write_text(providers_file(provider.base_url, "local/coder"))
    proxy = Proxy(tmp_path, extra_args=["--mode", "regular", "--mode", f"reverse:https://127.0.0.1:{closed}@127.0.0.1:{port}"],
                  options={"keep_host_header": "true"}).start()
    direct = ("127.0.0.1", port)
    try:
        for http2 in (False, True):
            provider.enqueue("openai_completions", COMPLETIONS.text_reply("2"))
            answer = run(stream_cpp(proxy.url, proxy.ca_file, request("x = 1 + \n", 0, 8), http2=http2, direct=direct))
            assert answer.error is None and answer.edit().text == "x = 1 + 2"
        config = run(unary(proxy.url, proxy.ca_file, CPP_CONFIG, cpb.CppConfigRequest(), direct=direct))
        assert config.status_code == 200 and cpb.CppConfigResponse.FromString(config.content).is_on
        models = run(unary(proxy.url, proxy.ca_file, CPP_MODELS, cpb.AvailableCppModelsRequest(), json_codec=True,
                           direct=direct))
        assert models.json()["defaultModel"] == "local/coder"
        fate = run(unary(proxy.url, proxy.ca_file, "/aiserver.v1.CppService/RecordCppFate",
                         cpb.RecordCppFateRequest(), direct=direct))
        assert fate.status_code == 200
        assert f"CppConfig answered locally: 127.0.0.1:{closed} unreachable" in proxy.log()
    finally:
        proxy.stop()


def test_observe_mode_passes_stream_cpp_on_and_logs_the_line_convention(tmp_path, provider, upstream):
    (tmp_path / "providers.toml").write_text(providers_file(provider.base_url, "local/coder"))
    proxy = Proxy(tmp_path, extra_scripts=[str(ROOT / "tests/support/redirect_upstream.py")],
                  options={"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true",
                           "byok_upstream_probe_ms": "0", "byok_mode": "observe"}).start()
    try:
        before = len(provider.requests)
        req = request("a\nx = \nb", 0, 0, contents_start_at_line=0)  # the canned answer replaces line 1
        answer = run(stream_cpp(proxy.url, proxy.ca_file, req, headers={"x-request-id": "observed-1"}))
        assert answer.raw == UPSTREAM_STREAM_CPP and len(provider.requests) == before  # Cursor answered, untouched
        assert upstream.requests(STREAM_CPP)[-1].body == connect.encode_envelope(req.SerializeToString())
        deadline = time.monotonic() + 10
        while "Tab observed:" not in proxy.log():
            assert time.monotonic() < deadline, proxy.log()
            time.sleep(0.05)
        assert "Cursor replaced 1-1: both readings fit" in proxy.log()
        observed, = positions(proxy, "observed-1")
        assert (observed["source"], observed["range_start"], observed["range_end"]) == ("observed", 1, 1)
    finally:
        proxy.stop()
