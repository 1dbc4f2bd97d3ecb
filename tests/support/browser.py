"""A real headless Chromium for tests (Debian's `chromium` + `chromium-driver`, driven by selenium).

    with Browser(proxy_url, home) as browser:          # every request goes through the test's proxy
        browser.open("http://cursor-byok.invalid/")
        browser.wait_for(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.run"))
        assert browser.console_errors() == []

Chromium starts with its background networking off (no component updates, sync, pings, metrics
uploads, safe browsing fetches), a fresh profile, and the proxy as its only way out; the proxy loads
tests/support/loopback_only.py so nothing it is asked for leaves the machine either. For a proxy that
wants proxyauth, `ProxyAuthForwarder` sits between Chromium and the proxy and adds the credentials
(a headless browser cannot answer a 407 dialog).
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import threading
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-pings",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
    "--disable-client-side-phishing-detection", "--disable-domain-reliability", "--no-default-browser-check",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--disable-dev-shm-usage",
)


def unavailable_reason() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} is missing: apt-get install {package}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


class Browser:
    def __init__(self, proxy_url: str, home: Path, *, size: tuple[int, int] = (1280, 900),
                 color_scheme: str | None = None) -> None:
        self.proxy_url = proxy_url
        self.profile = Path(home) / "chromium-profile"
        self.size = size
        self.color_scheme = color_scheme
        self.driver = None

    def __enter__(self) -> "Browser":
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        shutil.rmtree(self.profile, ignore_errors=True)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--proxy-server={self.proxy_url}")
        options.add_argument("--proxy-bypass-list=<-loopback>")  # even loopback goes through the proxy
        options.add_argument(f"--user-data-dir={self.profile}")
        options.add_argument(f"--window-size={self.size[0]},{self.size[1]}")
        if self.color_scheme == "dark":
            options.add_argument("--force-dark-mode")
            options.add_argument("--blink-settings=preferredColorScheme=0")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        env_before = os.environ.get("SE_OFFLINE")
        os.environ["SE_OFFLINE"] = "true"  # selenium-manager must never download a driver or a browser
        try:
            self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        finally:
            if env_before is None:
                os.environ.pop("SE_OFFLINE", None)
        self.driver.set_page_load_timeout(30)
        return self

    def __exit__(self, *exc) -> None:
        if self.driver is not None:
            self.driver.quit()
            self.driver = None

    def open(self, url: str) -> None:
        self.driver.get(url)

    def wait_for(self, condition, timeout: float = 20.0, message: str = ""):
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(condition, message)

    def text(self, css: str = "body") -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def console_errors(self) -> list[dict]:
        """Console entries at error level since the last call (the log is drained by reading it)."""
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def screenshot(self, path: Path, full_height: bool = True) -> None:
        if full_height:
            height = self.driver.execute_script("return document.documentElement.scrollHeight")
            self.driver.set_window_size(self.size[0], min(max(height + 20, 400), 4000))
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(*self.size)


class ProxyAuthForwarder:
    """A loopback TCP forwarder to the proxy that adds `Proxy-Authorization` to each plain-HTTP
    request (the dashboard is plain HTTP), so a headless Chromium reaches a proxyauth proxy as `user`."""

    def __init__(self, proxy_host: str, proxy_port: int, user: str, password: str) -> None:
        self.target = (proxy_host, proxy_port)
        self.header = b"Proxy-Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()) + b"\r\n"
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ProxyAuthForwarder":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("forwarder did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        tasks: set[asyncio.Task] = set()
        self._tasks = tasks
        async with server:
            await self._stop.wait()
        for task in list(tasks):
            task.cancel()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        back = asyncio.ensure_future(self._pipe(up_reader, writer))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                first, _, rest = head.partition(b"\r\n")
                up_writer.write(first + b"\r\n" + self.header + rest)
                length = 0
                for line in rest.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    up_writer.write(await reader.readexactly(length))
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            up_writer.close()
            back.cancel()
            writer.close()
            self._tasks.discard(asyncio.current_task())

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, message: str = "condition"):
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{message} not reached within {timeout}s")
