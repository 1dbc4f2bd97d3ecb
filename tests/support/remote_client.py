"""A Cursor-like client run as its own process (e.g. inside a network namespace, "another machine").

    python -m tests.support.remote_client --proxy http://[user:pass@]HOST:PORT --ca CA --model ID

Fetches AvailableModels through the proxy, then runs one agent turn on `--model` over RunSSE and one
over HTTP/2 Run, and prints one JSON object: {"models": {"status", "names"} | {"error"}, "turn" and
"turn_h2": {"status", "end_error", "text"} | {"error"}}. Connection-level failures (e.g. a 407 on
CONNECT) are reported as "error" strings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl

import httpx

from byok.cli.client import CursorClient, UnexpectedAnswer, user_turn_request
from byok.cli.h2client import H2CursorClient
from byok.wire.connect import ConnectError
from byok.transports.h2conn import H2Error
from byok.proto import aiserver_pb2 as spb

MODELS_PATH = "/aiserver.v1.AiService/AvailableModels"


async def available_models(proxy: str, ca: str) -> dict:
    """AvailableModels through the proxy: {"status", "names"}, or {"error"} for a connection-level failure."""
    verify = ssl.create_default_context(cafile=ca)
    async with httpx.AsyncClient(proxy=proxy, verify=verify, trust_env=False, timeout=20) as http:
        try:
            response = await http.post("https://api2.cursor.sh" + MODELS_PATH, content=b"",
                                       headers={"content-type": "application/proto"})
        except httpx.HTTPError as e:
            return {"error": f"{type(e).__name__}: {e}"}
    names = list(spb.AvailableModelsResponse.FromString(response.content).model_names) \
        if response.status_code == 200 else []
    return {"status": response.status_code, "names": names}


def _turn(result) -> dict:
    error = result.end_error
    return {"status": result.status, "text": result.text(),
            "end_error": None if error is None else {"code": error.code.value, "message": error.message}}


async def main(args: argparse.Namespace) -> dict:
    out: dict = {"models": await available_models(args.proxy, args.ca)}
    try:
        async with CursorClient(args.proxy, args.ca, timeout_s=30) as client:
            out["turn"] = _turn(await client.run(user_turn_request("hello from afar", model_id=args.model)))
    except httpx.HTTPError as e:
        out["turn"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        async with H2CursorClient(args.proxy, args.ca, timeout_s=30) as client:
            out["turn_h2"] = _turn(await client.run(user_turn_request("hello over h2", model_id=args.model)))
    except (H2Error, OSError, ConnectError, UnexpectedAnswer) as e:
        out["turn_h2"] = {"error": f"{type(e).__name__}: {e}"}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--model", required=True)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
