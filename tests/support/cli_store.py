"""A store written the way the proxy writes it (runs, messages, provider calls, a tool round, frames),
with a secret and home paths inside, for the CLI tests (trace, usage, captures export)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from byok.wire import connect
from byok.agent.cursor import updates
from byok.proto import agent_pb2 as apb
from byok.store import NewMessage, Store, blob_id

SECRET = "sk-unit-SECRET-0123456789abcdef"
DAY1, DAY2 = "2026-01-02", "2026-01-03"


@dataclass
class Built:
    db: Path
    home: Path
    conversation_id: str = "conv-unit-1"
    request_ok: str = "req-unit-ok-0001"
    request_failed: str = "req-unit-failed-0002"
    model_call_ok: str = "model-call-ok-1"
    model_call_tool: str = "model-call-tool-1"
    model_call_failed: str = "model-call-failed-1"
    tool_call_id: str = "call_read_unit_1"
    tool_round_id: str = "round-unit-1"


def _frame_rows(request_id: str, home: Path, ts: int) -> list[dict]:
    """A short but real frame sequence, both directions, with a secret and a home path inside."""
    request = apb.AgentRunRequest(conversation_id="conv-unit-1",
                                  requested_model=apb.RequestedModel(model_id="abcd1234"))
    request.conversation_state.SetInParent()
    um = request.action.user_message_action.user_message
    um.text = f"please read {home}/project/a.py, my key is {SECRET}"
    um.message_id = "msg-unit-1"
    blob = json.dumps({"role": "user", "content": f"cwd {home}/project"}).encode()
    down = [
        updates.kv_set(0, blob_id(blob), blob),
        updates.text_delta("Reading"),
        updates.heartbeat(),
        updates.text_delta(" the file."),
        updates.thinking_completed(7),
    ]
    up = [
        apb.AgentClientMessage(run_request=request),
        apb.AgentClientMessage(kv_client_message=apb.KvClientMessage(id=0, set_blob_result=apb.SetBlobResult())),
    ]
    rows = []
    for seq, message in enumerate(up):
        rows.append({"request_id": request_id, "conversation_id": None, "seq": seq, "direction": "up",
                     "ts_ms": ts + seq, "kind": message.WhichOneof("message"), "flags": 0,
                     "data": message.SerializeToString()})
    for seq, message in enumerate(down):
        rows.append({"request_id": request_id, "conversation_id": None, "seq": seq, "direction": "down",
                     "ts_ms": ts + 10 + seq, "kind": message.WhichOneof("message"), "flags": 0,
                     "data": message.SerializeToString()})
    rows.append({"request_id": request_id, "conversation_id": None, "seq": len(down), "direction": "down",
                 "ts_ms": ts + 30, "kind": "end_stream", "flags": connect.FLAG_END_STREAM, "data": b"{}"})
    return rows


def build_store(path: Path, home: Path) -> Built:
    b = Built(path, home)
    ticks = iter(range(1_767_312_000_000, 1_767_312_000_000 + 10_000_000, 1000))  # 2026-01-02T00:00Z
    store = Store.open(path)
    store.clock_ms = lambda: next(ticks)
    cid = b.conversation_id
    # run 1: a tool round, then the final answer
    store.claim_run(b.request_ok, cid, model_public_id="abcd1234", mode="agent", action="user_message_action")
    rev = store.append(cid, None, [NewMessage("user", "runtime", {"kind": "runtime", "parts": [], "wire_id": "w1"},
                                              runtime_event_id="w1", request_id=b.request_ok)],
                       fence_request_id=b.request_ok)
    call = {"call_id": b.tool_call_id, "name": "Read", "arguments": json.dumps({"path": f"{home}/project/a.py"}),
            "index": 0}
    assistant = {"kind": "assistant", "text": "Reading the file.", "tool_calls": [call],
                 "model_call_id": b.model_call_tool}
    # the round keeps the assistant as the engine stages it (AI-SDK shape: content[].input / toolCallId)
    staged = {"role": "assistant", "id": "1", "content": [
        {"type": "text", "text": "Reading the file."},
        {"type": "tool-call", "toolCallId": b.tool_call_id, "toolName": "Read",
         "input": {"path": f"{home}/project/a.py"}}]}
    store.stage_round(b.tool_round_id, cid, b.request_ok, rev, staged, [(0, b.tool_call_id, "Read")])
    tool = {"kind": "tool", "call_id": b.tool_call_id, "name": "Read", "content": "print('hi')\n", "is_error": False,
            "tool_round_id": b.tool_round_id, "call_index": 0, "tool_call": ""}
    _, rev = store.complete_call(b.tool_round_id, 0, cid, rev, [
        NewMessage("assistant", "assistant", {**assistant, "tool_round_id": b.tool_round_id}, request_id=b.request_ok),
        NewMessage("tool", "tool", tool, request_id=b.request_ok)], fence_request_id=b.request_ok, is_error=False)
    store.settle_round(b.tool_round_id)
    sse = ('data: {"choices":[{"delta":{"content":"Reading"}}]}\n\n'
           'data: {"choices":[{"delta":{"content":" the file."}}],"usage":{"prompt_tokens":100}}\n\ndata: [DONE]\n\n')
    for index, (mcid, day, status, usage, err) in enumerate([
        (b.model_call_tool, DAY1, "ok", (1000, 20, 600, None), None),
        (b.model_call_ok, DAY1, "ok", (1200, 30, 1000, 50), None),
    ]):
        llm = store.begin_llm_call({
            "request_id": b.request_ok, "conversation_id": cid, "call_index": index, "model_call_id": mcid,
            "provider": "deepseek", "provider_kind": "openai_chat", "model_public_id": "abcd1234",
            "model": "deepseek-chat", "started_at": f"{day}T10:00:0{index}.000+00:00", "message_count": 1,
            "tool_count": 16})
        store.finish_llm_call(llm, {
            "status": status, "finish_reason": "tool_use" if index == 0 else "stop", "ttfb_ms": 120.5,
            "ttft_ms": 300.25, "total_ms": 900.0, "input_tokens": usage[0], "output_tokens": usage[1],
            "cache_read_tokens": usage[2], "cache_write_tokens": usage[3], "error": err,
            "request_body": json.dumps({"model": "deepseek-chat", "api_key_echo": SECRET,
                                        "messages": [{"role": "user", "content": f"open {home}/project"}]}),
            "raw_response": sse.encode()})
    store.append(cid, rev, [NewMessage("assistant", "assistant", {"kind": "assistant", "text": "Done."},
                                       request_id=b.request_ok)], fence_request_id=b.request_ok)
    store.record_frames(_frame_rows(b.request_ok, home, 1_767_312_000_000))
    store.finish_run(b.request_ok, "completed", usage={"input_tokens": 2200, "output_tokens": 50})
    # run 2 (a day later): the provider failed
    store.claim_run(b.request_failed, cid, model_public_id="ef567890", mode="agent", action="user_message_action")
    llm = store.begin_llm_call({
        "request_id": b.request_failed, "conversation_id": cid, "call_index": 0, "model_call_id": b.model_call_failed,
        "provider": "anthropic", "provider_kind": "anthropic", "model_public_id": "ef567890", "model": "claude-x",
        "started_at": f"{DAY2}T09:00:00.000+00:00", "message_count": 3, "tool_count": 16})
    store.finish_llm_call(llm, {"status": "error", "error": "HTTP 529 from provider: overloaded", "ttfb_ms": 80.0,
                                "total_ms": 81.0})
    error = connect.ConnectError(connect.Code.UNAVAILABLE, "provider error: HTTP 529")
    store.record_frames([{"request_id": b.request_failed, "conversation_id": None, "seq": 0, "direction": "down",
                          "ts_ms": 1_767_398_400_000, "kind": "end_stream", "flags": connect.FLAG_END_STREAM,
                          "data": connect.encode_end_stream(error)[5:]}])
    store.finish_run(b.request_failed, "failed", error_code="unavailable", error_message="provider error: HTTP 529")
    store.close()
    return b
