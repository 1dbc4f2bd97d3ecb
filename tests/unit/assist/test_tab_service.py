"""stream_cpp against a scripted provider on loopback and a real SQLite store (no mitmproxy): frame order, the answer applies,
each template's prompt, the chat path, errors, the deadline, cancellation, and the llm_calls row."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
from pathlib import Path

import pytest

from byok.assist.call import CallContext
from byok.assist.tab import FileNotSynced, TabDeadline, stream_cpp
from byok.assist.tab_edit import Edit, apply_edit
from byok.proto import cpp_pb2 as cpb
from byok.providers.config import parse_providers
from byok.providers.io import StreamLimits, make_client
from byok.store import AsyncStore
from byok.wire.errors import ProtocolError, ProviderError
from tests.support.scripted_provider import CHAT, COMPLETIONS, MISTRAL_FIM, Hang, HttpError, ScriptedProvider

pytestmark = pytest.mark.timeout(30)


class Recorded:
    """A real store (SQLite, byok.store) in a temporary folder, and what a Tab call wrote to it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "byok.db"

    def _select(self, table: str) -> list[dict]:
        db = sqlite3.connect(self.path)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY id")]
        finally:
            db.close()

    @property
    def rows(self) -> dict[int, dict]:
        return {n: row for n, row in enumerate(self._select("llm_calls"), start=1)}

    @property
    def positions(self) -> list[dict]:
        return self._select("tab_positions")


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


def config_for(provider: ScriptedProvider, kind: str = "openai_completions", fim: str | None = None,
               tab: str = "", base: str | None = None):
    fim_line = f'fim = "{fim}"' if fim else ""
    text = f"""
[[providers]]
name = "p"
kind = "{kind}"
base_url = "{base or provider.base_url}"
api_key = "sk-test"
[[providers.models]]
id = "m"
{fim_line}
{"max_output_tokens = 512" if kind == "anthropic" else ""}

[tab]
model = "p/m"
{tab}
"""
    config, _ = parse_providers(text)
    return config


def request(contents: str, line: int, column: int, **fields) -> cpb.StreamCppRequest:
    return cpb.StreamCppRequest(current_file=cpb.CurrentFileInfo(
        relative_workspace_path="a.py", language_id="python", contents=contents,
        cursor_position=cpb.CursorPosition(line=line, column=column), **fields), **fields.pop("outer", {}))


async def serve(config, req: cpb.StreamCppRequest, recorded: Recorded | None = None, *,
                deadline_s: float | None = None, leave_after: int | None = None) -> list[cpb.StreamCppResponse]:
    with tempfile.TemporaryDirectory() as folder:
        store = await AsyncStore.open((recorded or Recorded(Path(folder))).path)
        try:
            return await _serve(config, req, store, deadline_s=deadline_s, leave_after=leave_after)
        finally:  # the writes a call queued (its tab_positions row) land before the store closes
            await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()),
                                 return_exceptions=True)
            await store.close()


async def _serve(config, req, store, *, deadline_s, leave_after) -> list[cpb.StreamCppResponse]:
    frames = []
    async with make_client() as http:
        ctx = CallContext(request_id="req-1", route=config.tab_route, http=http, limits=StreamLimits(5, 5),
                          store=store, deadline_s=deadline_s, config=config)
        async with contextlib.aclosing(stream_cpp(req, ctx)) as stream:
            async for frame in stream:
                frames.append(frame)
                if leave_after is not None and len(frames) >= leave_after:
                    break
    return frames


def kinds(frames) -> list[str]:
    out = []
    for f in frames:
        out.append("model_info" if f.HasField("model_info") else "range" if f.HasField("range_to_replace")
                   else "done" if f.done_stream else "text")
    return out


def edit_of(frames) -> Edit:
    r = next(f.range_to_replace for f in frames if f.HasField("range_to_replace"))
    return Edit(r.start_line_number, r.end_line_number_inclusive, "".join(f.text for f in frames))


CODE = "def add(a, b):\r\n    return a + \r\n\r\nprint(add(1, 2))\r\n"


def test_fim_answer_frames_apply_and_row(provider, tmp_path):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("b", pieces=1, litellm=True))
    store = Recorded(tmp_path)
    frames = asyncio.run(serve(config_for(provider), request(CODE, 1, 15), store))
    assert kinds(frames)[:3] == ["model_info", "range", "text"] and kinds(frames)[-1] == "done"
    assert all(not f.text for f in frames if f.HasField("model_info") or f.HasField("range_to_replace"))
    edit = edit_of(frames)
    assert edit == Edit(2, 2, "    return a + b")
    assert apply_edit(CODE, "\r\n", 0, edit) == CODE.replace("a + \r\n", "a + b\r\n")
    body = provider.requests[-1].json
    assert body["prompt"] == "def add(a, b):\n    return a + " and body["suffix"].startswith("\n\nprint(add(1, 2))")
    assert body["stop"] == ["\n\n"] and body["max_tokens"] == 128
    row = store.rows[1]
    assert row["purpose"] == "tab" and row["status"] == "ok" and row["request_id"] == "req-1"
    assert (row["input_tokens"], row["output_tokens"]) == (100, 20) and row["provider_kind"] == "openai_completions"
    position, = store.positions
    assert (position["source"], position["cursor_line"], position["cursor_column"], position["column_fits"],
            position["line_ending"]) == ("answered", 1, 15, "ok", None)


@pytest.mark.parametrize("fim,start,middle,end", [
    ("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("codellama", "<PRE> ", " <SUF>", " <MID>"),
    ("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
])
def test_each_template_builds_one_prompt(provider, fim, start, middle, end):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("b<|endoftext|>ignored"))
    frames = asyncio.run(serve(config_for(provider, fim=fim), request("x = a + \n", 0, 8)))
    body = provider.requests[-1].json
    assert "suffix" not in body and body["prompt"] == f"{start}x = a + {middle}\n{end}"
    assert body["stop"] and edit_of(frames).text == "x = a + b"


def test_mistral_fim_endpoint(provider):
    provider.enqueue("mistral_fim", MISTRAL_FIM.text_reply("1, 2)"))
    frames = asyncio.run(serve(config_for(provider, kind="mistral_fim"), request("f(\n", 0, 2)))
    assert provider.requests[-1].path == "/v1/fim/completions" and edit_of(frames).text == "f(1, 2)"


def test_no_suggestion_sends_no_range(provider):
    provider.enqueue("openai_completions", COMPLETIONS.text_reply("   "))
    frames = asyncio.run(serve(config_for(provider), request("x = \n", 0, 4)))
    assert kinds(frames) == ["model_info", "done"]


def test_chat_model_rewrites_the_window(provider):
    provider.enqueue("openai_chat", CHAT.text_reply(
        "<edit>\ndef add(a, b):\n    return a + b\n\nprint(add(1, 2))\n</edit>", pieces=5))
    frames = asyncio.run(serve(config_for(provider, kind="openai_chat"), request(CODE, 1, 15)))
    edit = edit_of(frames)
    assert (edit.start_line, edit.end_line) == (1, 4)  # the file's last, empty line is not in the window
    assert apply_edit(CODE, "\r\n", 0, edit) == CODE.replace("a + \r\n", "a + b\r\n")
    sent = provider.requests[-1].json["messages"]
    assert sent[0]["role"] == "system" and "<|cursor|>" in sent[1]["content"]


def test_budget_cut_is_an_error_without_a_range(provider, tmp_path):
    provider.enqueue("openai_completions", COMPLETIONS.length_cutoff("b + c + d"))
    store = Recorded(tmp_path)
    with pytest.raises(ProviderError, match="token budget") as e:
        asyncio.run(serve(config_for(provider), request("x = a + \n", 0, 8), store))
    assert e.value.kind == "length" and store.rows[1]["status"] == "error"


def test_provider_http_error(provider):
    provider.enqueue("openai_completions", HttpError(503, {"error": {"message": "model loading"}}))
    frames: list = []
    with pytest.raises(ProviderError, match="model loading"):
        asyncio.run(serve(config_for(provider), request("x = \n", 0, 4)))
    assert frames == []


def test_rely_on_filesync_without_contents_asks_for_the_file(provider):
    with pytest.raises(FileNotSynced) as e:
        asyncio.run(serve(config_for(provider), request("", 0, 0, rely_on_filesync=True)))
    detail = e.value.to_connect().details[0]
    from byok.proto import aiserver_pb2 as spb
    assert spb.ErrorDetails.FromString(detail.value).error == spb.ErrorDetails.ERROR_FILE_NOT_FOUND


def test_a_bad_cursor_is_a_protocol_error_and_is_recorded(provider, tmp_path):
    store = Recorded(tmp_path)
    with pytest.raises(ProtocolError):
        asyncio.run(serve(config_for(provider), request("ab\n", 0, 9), store))
    assert store.positions[0]["column_fits"] == "past_end"  # cursor-byok verify reports it


def test_the_deadline(provider):
    provider.enqueue("openai_completions", Hang(5))
    with pytest.raises(TabDeadline):
        asyncio.run(serve(config_for(provider), request("x = \n", 0, 4), deadline_s=0.3))
    assert provider.wait_closed(len(provider.requests)).closed_early


def test_leaving_mid_stream_closes_the_provider_request_and_records_the_cancel(provider, tmp_path):
    provider.enqueue("openai_completions", COMPLETIONS.endless("y", every_s=0.05))
    store = Recorded(tmp_path)
    frames = asyncio.run(serve(config_for(provider, tab="max_tokens = 4096"), request("x = \n", 0, 4), store,
                               leave_after=3))
    assert kinds(frames) == ["model_info", "range", "text"]
    assert provider.wait_closed(len(provider.requests)).closed_early
    assert store.rows[1]["status"] == "canceled"


def test_a_rule_stop_closes_the_provider_request(provider):
    provider.enqueue("openai_completions", COMPLETIONS.endless("y\n\n", every_s=0.05))
    frames = asyncio.run(serve(config_for(provider, tab="max_tokens = 4096"), request("x = \n", 0, 4)))
    assert edit_of(frames).text == "x = y" and kinds(frames)[-1] == "done"
    assert provider.wait_closed(len(provider.requests)).closed_early
    assert provider.requests[-1].json["stop"] == ["\n\n"]  # a server that honours it ends by itself
