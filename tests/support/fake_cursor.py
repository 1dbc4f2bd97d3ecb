"""A fake "official" Cursor backend for tests: a local TLS server standing in for api2.cursor.sh.

The proxy under test reaches it through `tests/support/redirect_upstream.py` (a test-only mitmproxy
script loaded after the addon): the flow keeps its real host, so routing sees what Cursor sends,
while the connection goes to this server (the proxy runs with `ssl_insecure=true`).

Behaviour by path:
- `/agent.v1.AgentService/RunSSE`: streams `script_frames` (Connect envelopes) with a delay
  between them, then `{}`: what an official run looks like on the wire.
- `/aiserver.v1.BidiService/BidiAppend`: 200 empty.
- model lists: the bytes in `model_list_payloads[path]`.
- `/slow`: five chunks, 100 ms apart (streamed passthrough check).
- anything else: 200 "upstream ok".
Every request is recorded (path, headers, body, time).
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from byok.wire import connect
from byok.agent.cursor import updates


def self_signed(directory: Path, host: str = "api2.cursor.sh") -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host), x509.DNSName("*.cursor.sh")]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "up.crt", directory / "up.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes
    t: float


def official_run_frames(text: str = "official answer") -> list[bytes]:
    return [
        connect.encode_envelope(updates.text_delta(part).SerializeToString())
        for part in (text[: len(text) // 2], text[len(text) // 2 :])
    ] + [connect.encode_end_stream()]


@dataclass
class FakeCursor:
    frame_delay_s: float = 0.05
    script_frames: list[bytes] = field(default_factory=official_run_frames)
    model_list_payloads: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """path -> (content-type, body)"""
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()

    def start(self) -> "FakeCursor":
        cert, key = self_signed(Path(self._dir.name))
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ssl.load_cert_chain(cert, key)
        self._ssl.set_alpn_protocols(["http/1.1"])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._ssl)
            self.port = self._server.sockets[0].getsockname()[1]
            self._started.set()

        self._loop.run_until_complete(main())
        self._loop.run_forever()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._dir.cleanup()

    def __enter__(self) -> "FakeCursor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        body += (await reader.readexactly(size + 2))[:-2]
                        if size == 0:
                            break
                self.seen.append(Seen(method, path, headers, body, time.monotonic()))
                await self._respond(path, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _respond(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path == "/agent.v1.AgentService/RunSSE":
            await self._chunked(writer, "application/connect+proto", self.script_frames, self.frame_delay_s)
        elif path == "/slow":
            chunks = [f"chunk {i} at {time.monotonic():.3f}\n".encode() for i in range(5)]
            await self._chunked(writer, "text/plain", chunks, 0.1, lazy=True)
        elif path in self.model_list_payloads:
            ctype, body = self.model_list_payloads[path]
            writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
        elif path == "/aiserver.v1.BidiService/BidiAppend":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
        else:
            body = b"upstream ok"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    @staticmethod
    async def _chunked(writer, ctype: str, chunks, delay: float, lazy: bool = False) -> None:
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n\r\n".encode())
        await writer.drain()
        for chunk in chunks:
            await asyncio.sleep(delay)
            if lazy:  # stamp the send time
                chunk = f"chunk sent at {time.monotonic():.6f}\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
