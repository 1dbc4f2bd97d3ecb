"""The one-shot transport (addon/transports/one_shot.py) through a real mitmdump, apart from any real
service: two probe services (tests/support/one_shot_probe.py), unary and server-streaming, over HTTP/1.1
and HTTP/2. The real services (Tab, commit messages, ...) have their own e2e tests."""

from __future__ import annotations

import json
import os
import ssl
import time

import httpx
import pytest

from byok.proto import aiserver_pb2 as spb
from byok.transports.h2conn import H2Connection
from byok.wire import connect
from tests.e2e.conftest import ROOT, run
from tests.e2e.harness import Proxy, model_entry, providers_toml
from tests.support.scripted_provider import ScriptedProvider

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

ECHO = "/aiserver.v1.ProbeService/Echo"
COUNT = "/aiserver.v1.ProbeService/Count"
HOST = "api2.cursor.sh"


@pytest.fixture(scope="module")
def env(tmp_path_factory, upstream):
    home = tmp_path_factory.mktemp("one_shot")
    probe_log = home / "probe.log"
    with ScriptedProvider() as provider:
        (home / "providers.toml").write_text(providers_toml([model_entry(provider.base_url, model_id="probe-model")]))
        old = os.environ.get("BYOK_PROBE_LOG")
        os.environ["BYOK_PROBE_LOG"] = str(probe_log)
        try:
            proxy = Proxy(home, pre_scripts=[str(ROOT / "tests/support/one_shot_probe.py")],
                          extra_scripts=[str(ROOT / "tests/support/redirect_upstream.py")],
                          options={"test_upstream": f"127.0.0.1:{upstream.port}", "ssl_insecure": "true"}).start()
        finally:
            if old is None:
                os.environ.pop("BYOK_PROBE_LOG", None)
            else:
                os.environ["BYOK_PROBE_LOG"] = old
        yield proxy, upstream, probe_log
        proxy.stop()


def h1(proxy) -> httpx.Client:
    return httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_file), timeout=20,
                        trust_env=False)


def frames_of(body: bytes) -> tuple[list[str], connect.ConnectError | None, bool]:
    """(the request ids of the message frames, the end-stream error, whether an end-stream came)."""
    ids, error, ended = [], None, False
    for frame in connect.decode_all(body):
        if frame.end_stream:
            error, ended = connect.parse_end_stream(frame.payload), True
        else:
            ids.append(spb.BidiRequestId.FromString(frame.payload).request_id)
    return ids, error, ended


def test_unary_call_answered_in_proto_and_in_json(env):
    proxy, _, _ = env
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{ECHO}", content=spb.BidiRequestId(request_id="hi").SerializeToString(),
                             headers={"content-type": "application/proto"})
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/proto"
        assert spb.BidiRequestId.FromString(answer.content).request_id == "echo:hi:probe-model"
        answer = client.post(f"https://{HOST}{ECHO}", content=json.dumps({"requestId": "js"}),
                             headers={"content-type": "application/json"})
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        assert answer.json() == {"requestId": "echo:js:probe-model"}


def test_unary_provider_failure_is_a_connect_error_with_error_details(env):
    proxy, _, _ = env
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{ECHO}", content=spb.BidiRequestId(request_id="fail").SerializeToString(),
                             headers={"content-type": "application/proto"})
    assert answer.status_code == 503
    body = answer.json()
    assert body["code"] == "unavailable" and "the probe provider failed (HTTP 502)" in body["message"]
    detail = spb.ErrorDetails.FromString(connect.b64decode_lenient(body["details"][0]["value"]))
    assert body["details"][0]["type"] == "aiserver.v1.ErrorDetails" and detail.details.detail.endswith("(HTTP 502)")


def test_a_call_without_a_model_passes_upstream_as_sent(env):
    proxy, upstream, _ = env
    sent = spb.BidiRequestId(request_id="pass").SerializeToString()
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{ECHO}", content=sent, headers={"content-type": "application/proto"})
    assert answer.content == b"upstream ok"
    assert upstream.requests(ECHO)[-1].body == sent


def test_a_malformed_request_is_invalid_argument(env):
    proxy, _, _ = env
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{ECHO}", content=b"\xff\xff\xff", headers={"content-type": "application/proto"})
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_argument"
        answer = client.post(f"https://{HOST}{COUNT}", content=b"\x00\x00\x00\x00\x09abc",
                             headers={"content-type": "application/connect+proto"})
    ids, error, ended = frames_of(answer.content)
    assert ended and ids == [] and error.code is connect.Code.INVALID_ARGUMENT


def test_server_stream_over_http1_frames_then_a_clean_end(env):
    proxy, _, _ = env
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{COUNT}",
                             content=connect.encode_envelope(spb.BidiRequestId(request_id="3").SerializeToString()),
                             headers={"content-type": "application/connect+proto"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/connect+proto"
    assert frames_of(answer.content) == (["0", "1", "2"], None, True)


def test_server_stream_failure_ends_with_an_error_end_stream(env):
    proxy, _, _ = env
    with h1(proxy) as client:
        answer = client.post(f"https://{HOST}{COUNT}",
                             content=connect.encode_envelope(spb.BidiRequestId(request_id="fail").SerializeToString()),
                             headers={"content-type": "application/connect+proto"})
    ids, error, ended = frames_of(answer.content)
    assert ended and ids == ["0"] and error.code is connect.Code.UNAVAILABLE
    assert error.details and error.details[0].type == "aiserver.v1.ErrorDetails"


async def h2_call(proxy, path: str, request_id: str, *, abort_after_first: bool = False) -> tuple[bytes, int]:
    context = ssl.create_default_context(cafile=proxy.ca_file)
    conn = await H2Connection.open(HOST, 443, ssl_context=context, proxy=("127.0.0.1", proxy.port))
    try:
        stream = await conn.request([(":method", "POST"), (":scheme", "https"), (":authority", HOST),
                                     (":path", path), ("content-type", "application/connect+proto")])
        await stream.send(connect.encode_envelope(spb.BidiRequestId(request_id=request_id).SerializeToString()),
                          end_stream=True)
        status = int(dict(await stream.response)[":status"])
        body = bytearray()
        async for chunk in stream.chunks():
            body += chunk
            if abort_after_first and connect.decode_all(bytes(body)):
                stream.reset()
                break
        return bytes(body), status
    finally:
        await conn.close()


def test_server_stream_over_http2(env):
    proxy, _, _ = env
    body, status = run(h2_call(proxy, COUNT, "2"))
    assert status == 200 and frames_of(body) == (["0", "1"], None, True)


def test_a_client_abort_cancels_the_service_at_once(env):
    """Cursor aborts a Tab request on every keystroke: the service (and its provider request) must stop."""
    proxy, _, probe_log = env
    before = probe_log.read_text().count("cancelled") if probe_log.exists() else 0
    body, _ = run(h2_call(proxy, COUNT, "hang", abort_after_first=True))
    aborted_at = time.time()
    assert frames_of(body)[0] == ["0"]
    deadline = time.monotonic() + 10
    while (probe_log.read_text().count("cancelled") if probe_log.exists() else 0) <= before:
        assert time.monotonic() < deadline, "the service was not cancelled after the client reset its stream"
        time.sleep(0.01)
    cancelled_at = float(probe_log.read_text().strip().splitlines()[-1].split()[1])
    assert cancelled_at - aborted_at < 2.0
    assert "Traceback" not in proxy.log()
