"""Takes the dashboard screenshots in docs/img/: a real mitmdump after real turns, seen by headless Chromium.

    python -m tests.support.dashboard_screenshot [--out docs/img] [--history-days 12]

Starts `mitmdump -s addon/cursor_byok.py -s tests/support/loopback_only.py` (temporary confdir,
database, providers file with prices), drives agent turns through it with the Cursor-like client
against the scripted provider (a Read tool round, a plain answer, a provider failure, on two models),
then saves what Chromium shows: the overview (wide, light), a trace, the usage page, and the overview
in a narrow window in dark mode. So that the charts have more than today's bar, `--history-days` adds
provider calls on earlier days through the store API (the turns of today are real). Shrunk with
`pngquant` when it is installed. Nothing touches `~` or the network.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from byok.cli.client import user_turn_request
from tests.e2e.harness import ROOT, Proxy, model_entry, providers_toml, public_id, run_with_executor
from tests.support import browser as br
from tests.support.scripted_provider import CHAT, HttpError, ScriptedProvider, Usage

LOOPBACK_ONLY = str(ROOT / "tests" / "support" / "loopback_only.py")
DASHBOARD = "http://cursor-byok.invalid"


def models(provider: ScriptedProvider) -> list[dict]:
    return [
        model_entry(provider.base_url, model_id="deepseek-chat", name="deepseek", display_name="DeepSeek Chat (BYOK)",
                    extra={"prices": "{ input = 0.27, output = 1.10, cache_read = 0.07 }"}),
        model_entry(provider.base_url, model_id="gpt-4.1", name="openai", display_name="GPT-4.1 (BYOK)",
                    extra={"prices": "{ input = 2.0, output = 8.0, cache_read = 0.5 }"}),
    ]


def drive_turns(proxy: Proxy, provider: ScriptedProvider, ids: list[str], workspace: Path) -> str:
    """Three conversations: a tool round, a plain answer, a failed provider call. Returns the first
    conversation id."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.md").write_text("# Notes\n\nThe build runs with `make test`.\n")
    provider.enqueue("openai_chat",
                     CHAT.tool_calls([("call_read_notes", "Read", '{"path": "notes.md"}')],
                                     text="Let me look at the notes.", usage=Usage(12400, 48, cache_read_tokens=9800)),
                     CHAT.text_reply("Run `make test` from the repository root.",
                                     usage=Usage(12620, 36, cache_read_tokens=12300)))
    first = user_turn_request("How do I run the tests? Check notes.md.", model_id=ids[0], workspace=str(workspace))
    run_with_executor(proxy, first, workspace)
    provider.enqueue("openai_chat", CHAT.text_reply("A mutex guards the cache; readers copy the map first.",
                                                    usage=Usage(8300, 120, cache_read_tokens=4100)))
    run_with_executor(proxy, user_turn_request("Why is the cache thread-safe?", model_id=ids[1],
                                               workspace=str(workspace)), workspace)
    provider.enqueue("openai_chat", HttpError(529, {"error": {"message": "Overloaded", "type": "overloaded_error"}}))
    run_with_executor(proxy, user_turn_request("Summarise the open issues", model_id=ids[0],
                                               workspace=str(workspace)), workspace)
    return first.conversation_id


def add_history(db: Path, entries: list[dict], days: int) -> None:
    """Provider calls on the `days` days before today (the charts' earlier bars), one run per day."""
    from byok.store import Store

    store = Store.open(db)
    rng = random.Random(7)
    today = datetime.now(timezone.utc).date()
    try:
        for back in range(days, 0, -1):
            day = today - timedelta(days=back)
            for n, entry in enumerate(entries):
                if rng.random() < 0.25:
                    continue
                request_id = f"history-{day}-{n}"
                store.clock_ms = lambda d=day: int(datetime(d.year, d.month, d.day, 12, tzinfo=timezone.utc)
                                                   .timestamp() * 1000)
                store.claim_run(request_id, f"history-conversation-{day}-{n}", model_public_id=public_id(entry))
                for call in range(rng.randint(2, 6)):
                    prompt = rng.randint(6000, 40000)
                    row = store.begin_llm_call({
                        "request_id": request_id, "conversation_id": f"history-conversation-{day}-{n}",
                        "call_index": call, "provider": entry["name"], "provider_kind": entry["kind"],
                        "model_public_id": public_id(entry), "model": entry["model_id"],
                        "started_at": f"{day}T12:00:{call:02d}.000+00:00"})
                    store.finish_llm_call(row, {"status": "ok", "input_tokens": prompt,
                                                "output_tokens": rng.randint(40, 900),
                                                "cache_read_tokens": int(prompt * rng.uniform(0.4, 0.95)),
                                                "total_ms": rng.uniform(900, 9000)})
                store.finish_run(request_id, "completed")
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--history-days", type=int, default=12)
    args = parser.parse_args()
    if (why := br.unavailable_reason()) is not None:
        print(f"needs Chromium: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shots = {"overview": args.out / "dashboard.png", "trace": args.out / "dashboard-trace.png",
             "usage": args.out / "dashboard-usage.png", "narrow": args.out / "dashboard-narrow-dark.png"}
    with tempfile.TemporaryDirectory(prefix="byok-dash-shot-") as tmp, ScriptedProvider() as provider:
        home = Path(tmp)
        entries = models(provider)
        (home / "providers.toml").write_text(providers_toml(entries))
        proxy = Proxy(home, extra_scripts=[LOOPBACK_ONLY]).start()
        try:
            conversation = drive_turns(proxy, provider, [public_id(e) for e in entries], home / "project")
            add_history(proxy.db, entries, args.history_days)
            with br.Browser(proxy.url, home / "light", size=(1280, 900)) as browser:
                for name, page in (("overview", "/"), ("trace", f"/trace/{conversation}"), ("usage", "/usage")):
                    browser.open(DASHBOARD + page)
                    browser.wait_for(lambda d: d.execute_script("return document.readyState") == "complete")
                    browser.screenshot(shots[name])
                assert browser.console_errors() == []
            with br.Browser(proxy.url, home / "dark", size=(420, 900), color_scheme="dark") as browser:
                browser.open(DASHBOARD + "/")
                browser.wait_for(lambda d: d.execute_script("return document.readyState") == "complete")
                browser.screenshot(shots["narrow"])
        finally:
            proxy.stop()
    for path in shots.values():
        if shutil.which("pngquant"):  # palette PNG: a third of the size, same look (Debian package pngquant)
            subprocess.run(["pngquant", "--quality", "60-85", "--speed", "1", "--force", "--output", str(path),
                            str(path)], check=True)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
