"""Every page renders from the shared queries, on SQLite and PostgreSQL, for each kind of viewer."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from byok.cli import main as cli
from byok.dashboard.views import Viewer
from tests.unit.dashboard.conftest import get

PAGES = ["/", "/conversations", "/usage", "/usage?by=user", "/users", "/drift", "/doctor", "/verify", "/maintenance",
         "/live"]


def text(response) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", response.body.decode()))


@pytest.mark.parametrize("path", PAGES)
def test_each_page_renders(dashboard, path):
    response = get(dashboard, path)
    assert response.status == 200, response.body.decode()[:2000]
    headers = dict(response.headers)
    assert headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in headers["content-security-policy"]


def test_trace_shows_tool_calls_with_arguments_and_tokens(dashboard, built):
    response = get(dashboard, f"/trace/{built.conversation_id}")
    assert response.status == 200, response.body.decode()[:3000]
    body = text(response)
    assert built.request_ok in body and built.request_failed in body
    assert built.tool_call_id in body and "Read" in body and '"path"' in body
    assert "1,000" in body and "1,200" in body  # input tokens of the two calls
    assert "HTTP 529 from provider: overloaded" in body  # the failed call's error
    assert "please read" in body  # the user's words from the run_request frame


def test_frames_page_is_paginated(dashboard, built, monkeypatch):
    from byok.dashboard import views

    monkeypatch.setattr(views, "FRAMES_PER_PAGE", 3)
    first = text(get(dashboard, f"/frames/{built.request_ok}"))
    second = text(get(dashboard, f"/frames/{built.request_ok}?page=2"))
    assert "page 1 of 3" in first and "page 2 of 3" in second
    assert "run_request" in first and "run_request" not in second


def test_usage_cost_is_the_usage_commands(dashboard, built, providers_file, capsys):
    assert cli(["usage", "--db", str(built.db), "--config", str(providers_file), "--since", "2025-12-06",
                "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["totals"]["cost_usd"]
    body = get(dashboard, "/usage").body.decode()
    assert float(re.search(r'data-cost-usd="([^"]+)"', body).group(1)) == expected > 0


def test_a_user_sees_only_their_own(dashboard, built):
    alice = Viewer("alice", admin=False)
    assert built.conversation_id not in text(get(dashboard, "/conversations", alice))
    assert get(dashboard, f"/trace/{built.conversation_id}", alice).status == 404
    assert get(dashboard, f"/frames/{built.request_ok}", alice).status == 404
    assert built.request_ok not in text(get(dashboard, "/live", alice))
    assert "no provider calls" in text(get(dashboard, "/usage", alice))
    for operator_page in ("/drift", "/doctor", "/users", "/verify", "/maintenance"):
        assert get(dashboard, operator_page, alice).status == 403


def test_gc_needs_the_sessions_token(dashboard):
    page = get(dashboard, "/maintenance")
    cookie = dict(page.headers)["set-cookie"].split(";")[0]
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.body.decode()).group(1)
    form = {"content-type": "application/x-www-form-urlencoded"}
    stale = get(dashboard, "/gc", method="POST", headers={**form, "cookie": cookie}, body=b"csrf=0000&days=7")
    assert stale.status == 403
    foreign = get(dashboard, "/gc", method="POST", body=f"csrf={token}&days=7".encode(),
                  headers={**form, "cookie": cookie, "origin": "http://evil.example"})
    assert foreign.status == 403
    odd = get(dashboard, "/gc", method="POST", headers={**form, "cookie": cookie}, body="csrf=é&days=7".encode())
    assert odd.status == 403  # not a 500
    good = get(dashboard, "/gc", method="POST", body=f"csrf={token}&days=7".encode(),
               headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
                        "Origin": "http://cursor-byok.invalid"})
    assert good.status == 403 and "not available" in text(good)  # the token passed; no GC in this Dashboard


def test_verify_page_is_the_verify_commands_report(dashboard, built, capsys):
    """The operator's verify page and `cursor-byok verify --json` give the same verdicts."""
    assert cli(["verify", "--db", str(built.db), "--json"]) in (0, 1)
    expected = json.loads(capsys.readouterr().out)
    body = text(get(dashboard, "/verify"))
    for item in expected["assumptions"]:
        assert re.search(re.escape(item["id"]) + r"\s+" + re.escape(item["title"]) + r"\s+" + re.escape(item["verdict"]),
                         body), item["id"]
