"""Loud about protocol drift, through a real mitmdump: unknown fields and unknown oneof branches in agent
frames are counted in both directions and in every mode (a local run, a run passed upstream, observe
mode), with the client's version and an example request id; an unknown AgentClientMessage branch on a
local run is logged with its request id; `cursor-byok drift --json` reports it all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.protobuf.internal import encoder

from byok.wire import connect
from byok.agent.cursor import updates
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from tests.e2e.conftest import run, start_proxy
from tests.support.fake_cursor import FakeCursor
from tests.support.scripted_provider import CHAT, Usage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
CLI = str(Path(sys.executable).with_name("cursor-byok"))
VERSION = "3.99.0-drift"


def tag(number: int, wire_type: int) -> bytes:
    return encoder._VarintBytes((number << 3) | wire_type)


def down_with_unknowns() -> list[bytes]:
    """An official run's frames: a text delta whose TextDeltaUpdate has a new field, and an
    InteractionUpdate branch our schema lacks."""
    delta = updates.text_delta("official")
    delta.interaction_update.text_delta.MergeFromString(tag(901, 0) + b"\x01")
    branch = apb.AgentServerMessage()
    branch.interaction_update.MergeFromString(tag(902, 2) + b"\x00")
    return [connect.encode_envelope(delta.SerializeToString()), connect.encode_envelope(branch.SerializeToString()),
            connect.encode_end_stream()]


def request_with_unknown(model_id: str, conversation_id: str) -> apb.AgentRunRequest:
    request = user_turn_request("drift", model_id=model_id, conversation_id=conversation_id)
    request.action.user_message_action.user_message.MergeFromString(tag(903, 0) + b"\x05")
    return request


UNKNOWN_BRANCH = apb.AgentClientMessage.FromString(tag(904, 2) + b"\x02\x08\x01")


@pytest.fixture(scope="module")
def upstream():
    with FakeCursor(script_frames=down_with_unknowns(), frame_delay_s=0.01) as fake:
        yield fake


@pytest.fixture(scope="module")
def proxies(tmp_path_factory, provider, upstream):
    intercept, ids = start_proxy(tmp_path_factory.mktemp("drift-intercept"), provider, upstream,
                                 byok_route_wait_s="5")
    observe, _ = start_proxy(tmp_path_factory.mktemp("drift-observe"), provider, upstream, byok_mode="observe",
                             byok_route_wait_s="5")
    yield intercept, observe, ids["openai_chat"]
    intercept.stop()
    observe.stop()


async def drive(proxy, model_id: str, request_id: str, *, extra_up: bool) -> None:
    async with proxy.client(client_version=VERSION) as client:
        client.append_soon(request_id, apb.AgentClientMessage(
            run_request=request_with_unknown(model_id, f"conv-{request_id}")))
        if extra_up:
            client.append_soon(request_id, UNKNOWN_BRANCH)
        await client.run(apb.AgentRunRequest(), request_id=request_id, send_run_request=False)


def drift_report(proxy, want: int, timeout: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        done = subprocess.run([CLI, "drift", "--db", str(proxy.db), "--json"], capture_output=True, text=True,
                              timeout=30, env=env)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["unknown"]
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def keyed(rows: list[dict]) -> dict:
    return {(r["direction"], r["path"], r["field_number"]): r for r in rows}


def test_local_run_counts_and_logs_unknowns(proxies, provider):
    intercept, _, model_id = proxies
    provider.enqueue("openai_chat", CHAT.text_reply("local answer", usage=Usage(10, 3)))
    run(drive(intercept, model_id, "req-drift-local", extra_up=True))
    rows = keyed(drift_report(intercept, 2))
    user = rows[("up", "AgentClientMessage.run_request.action.user_message_action.user_message", 903)]
    assert (user["kind"], user["wire_type_name"], user["client_version"]) == ("field", "varint", VERSION)
    assert user["example_request_id"] == "req-drift-local" and user["first_seen_ms"] <= user["last_seen_ms"]
    branch = rows[("up", "AgentClientMessage", 904)]
    assert branch["kind"] == "oneof_branch" and branch["count"] == 1
    log = intercept.log()
    assert "[req-drift-local] unknown AgentClientMessage branch ignored: AgentClientMessage field 904" in log
    assert "[req-drift-local] protocol drift (up, client 3.99.0-drift)" in log


@pytest.mark.parametrize("mode", ["upstream", "observe"])
def test_runs_not_answered_here_count_both_directions(proxies, mode):
    intercept, observe, _ = proxies
    proxy = intercept if mode == "upstream" else observe
    request_id = f"req-drift-{mode}"
    run(drive(proxy, "claude-4.5-sonnet", request_id, extra_up=False))  # not a user model: official run
    rows = keyed([r for r in drift_report(proxy, 3) if r["example_request_id"] == request_id
                  or r["direction"] == "down"])
    assert rows[("down", "AgentServerMessage.interaction_update.text_delta", 901)]["kind"] == "field"
    down_branch = rows[("down", "AgentServerMessage.interaction_update", 902)]
    assert down_branch["kind"] == "oneof_branch" and down_branch["client_version"] == VERSION
    up = rows[("up", "AgentClientMessage.run_request.action.user_message_action.user_message", 903)]
    assert up["client_version"] == VERSION and up["example_request_id"] == request_id
