"""The dashboard's pure parts: who sees what, the charts, the cache-hit rate, keyset pages, the
team file's admins, server-sent events."""

from __future__ import annotations

import re

import pytest

from byok.agent.team import parse_team
from byok.dashboard import charts, queries
from byok.dashboard_endpoint import sse_event
from byok.dashboard.queries import Row
from byok.dashboard.views import Viewer, viewer_for
from byok.providers.config import ConfigFileError


def test_who_sees_what():
    local = viewer_for(user=None, loopback_client=True, team_enabled=False)
    assert local == Viewer(None, admin=True) and local.scope is queries.ALL and not local.sees_users
    assert isinstance(viewer_for(user=None, loopback_client=False, team_enabled=False), str)
    assert "sign in" in viewer_for(user=None, loopback_client=True, team_enabled=True)
    alice = viewer_for(user="alice", loopback_client=False, team_enabled=True, admins=frozenset({"carol"}))
    assert alice == Viewer("alice", admin=False) and alice.scope == "alice"
    carol = viewer_for(user="carol", loopback_client=False, team_enabled=True, admins=frozenset({"carol"}))
    assert carol.admin and carol.scope is queries.ALL and carol.sees_users
    # proxyauth without a team file: each user their own rows, nobody is an admin
    assert viewer_for(user="bob", loopback_client=True, team_enabled=False) == Viewer("bob", admin=False)


def test_team_file_admins_are_validated():
    assert parse_team('admins = ["carol", "dave"]\n[defaults]\nmodels = ["*"]\n').admins == {"carol", "dave"}
    assert parse_team("[defaults]\n").admins == frozenset()
    for bad in ('admins = "carol"\n', "admins = [1]\n", 'admins = [""]\n'):
        with pytest.raises(ConfigFileError, match="admins must be a list of user names"):
            parse_team(bad)


def test_stacked_bars_scale_stack_and_label():
    svg = str(charts.stacked_bars(["2026-01-01", "2026-01-02"], [charts.Series("a", [1, 3]),
                                                                 charts.Series("b <x>", [1, 0])], title="t"))
    heights = [float(h) for h in re.findall(r'<rect class="s\d" x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)"', svg)]
    assert len(heights) == 3  # the zero value draws nothing
    assert heights[0] == pytest.approx(heights[1]) and heights[2] == pytest.approx(3 * heights[0])
    assert "b &lt;x&gt;" in svg and "<x>" not in svg  # labels are escaped
    assert charts.nice_ceiling(0.37) == 0.5 and charts.nice_ceiling(1200) == 2000 and charts.nice_ceiling(0) == 1
    assert "no data" in str(charts.stacked_bars([], [], title="empty"))


def test_cache_hit_rate_counts_prompt_tokens_per_dialect():
    openai = Row("d", "o/m", 1, 0, 1000, 10, 600, 0, 0, provider_kind="openai_chat")  # cached inside input
    anthropic = Row("d", "a/m", 1, 0, 100, 10, 800, 100, 0, provider_kind="anthropic")  # cached apart from input
    hits = queries.cache_hits([openai, anthropic])
    assert hits["read"] == 1400 and hits["prompt"] == 1000 + 1000
    assert hits["rate"] == pytest.approx(0.7)
    assert [m["rate"] for m in hits["models"]] == [pytest.approx(0.8), pytest.approx(0.6)]
    assert queries.cache_hits([])["rate"] is None


def test_conversation_pages_follow_each_other(built, tmp_path):
    from byok.cli.common import open_db
    from byok.store import Store

    store = Store.open(built.db)
    ticks = iter(range(1_800_000_000_000, 1_800_000_100_000, 7))
    store.clock_ms = lambda: next(ticks)
    for n in range(7):
        store.claim_run(f"req-page-{n}", f"conv-page-{n}")
    store.close()
    conn = open_db(built.db)
    seen, before = [], None
    while True:
        page = queries.conversations(conn, user=queries.ALL, before=before, limit=3)
        seen += [c["id"] for c in page.items]
        if page.next_cursor is None:
            break
        before = page.next_cursor
    assert seen[:7] == [f"conv-page-{n}" for n in reversed(range(7))]
    assert seen[7:] == [built.conversation_id] and len(seen) == len(set(seen))


def test_server_sent_event_lines():
    assert sse_event("live", "<p>\na</p>") == b"event: live\ndata: <p>\ndata: a</p>\n\n"
