"""Test-only script loaded BEFORE cursor-byok: two probe services in byok.assist.SERVICES, so the one-shot
transport can be tested apart from any real service (Tab, commit messages, ...).

- unary  /aiserver.v1.ProbeService/Echo:  BidiRequestId{request_id} -> BidiRequestId{"echo:" + id};
  request_id "pass" -> no model (passes upstream); "fail" -> a ProviderError.
- stream /aiserver.v1.ProbeService/Count: BidiRequestId{"<n>"} -> n frames BidiRequestId{"<i>"};
  "fail" -> one frame, then a ProviderError; "hang" -> one frame, then waits until cancelled and writes
  the time it was cancelled to $BYOK_PROBE_LOG.
"""

import asyncio
import os
import time

import byok.assist
from byok.assist import OneShot
from byok.proto import aiserver_pb2 as spb
from byok.wire.errors import ProviderError


def first_model(message, config):
    if message.request_id == "pass" or not config.models:
        return None
    return config.models[0]


async def echo(message, ctx):
    if message.request_id == "fail":
        raise ProviderError("the probe provider failed", status=502)
    return spb.BidiRequestId(request_id=f"echo:{message.request_id}:{ctx.route.model_id}")


async def count(message, ctx):
    if message.request_id in ("fail", "hang"):
        yield spb.BidiRequestId(request_id="0")
        if message.request_id == "fail":
            raise ProviderError("the probe provider failed mid-stream", status=500)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            with open(os.environ["BYOK_PROBE_LOG"], "a") as f:
                f.write(f"cancelled {time.time():.6f}\n")
            raise
    for i in range(int(message.request_id)):
        yield spb.BidiRequestId(request_id=str(i))


byok.assist.SERVICES = (*byok.assist.SERVICES, OneShot(
    path="/aiserver.v1.ProbeService/Echo", feature="probe", request_type=spb.BidiRequestId,
    response_type=spb.BidiRequestId, streaming=False, serve=echo, route_for=first_model,
    may_answer=lambda config: bool(config.models),
), OneShot(
    path="/aiserver.v1.ProbeService/Count", feature="probe", request_type=spb.BidiRequestId,
    response_type=spb.BidiRequestId, streaming=True, serve=count, route_for=first_model,
    may_answer=lambda config: bool(config.models),
))
