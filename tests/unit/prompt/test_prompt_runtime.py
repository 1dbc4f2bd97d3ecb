"""Rendering the runtime (user-role) message of each mode."""

from __future__ import annotations

import re

import pytest

from byok.prompt.assets import load_assets

MARKERS = {
    "agent": "You are still in **Agent Mode**",
    "ask": "Ask mode is active.",
    "plan": "Plan mode is active.",
    "subagent": "You are working as a **subagent**",
}
OPTIONAL = ("REQUEST_CONTEXT", "OPEN_FILES", "SELECTED_CONTEXT", "ACTION_CONTEXT")


@pytest.fixture(scope="module")
def assets():
    return load_assets()


@pytest.mark.parametrize("mode", sorted(MARKERS))
def test_each_mode_renders_its_marker_and_one_user_query(assets, mode):
    text = assets.mode(mode).render_runtime(TIMESTAMP="T", USER_QUERY="question")
    assert MARKERS[mode] in text
    for other, marker in MARKERS.items():
        if other != mode:
            assert marker not in text
    assert text.count("<user_query>") == 1
    assert text.count("<user_query>\nquestion\n</user_query>") == 1
    assert text.endswith("<user_query>\nquestion\n</user_query>")


@pytest.mark.parametrize("mode", sorted(MARKERS))
def test_absent_sections_render_as_nothing(assets, mode):
    text = assets.mode(mode).render_runtime(TIMESTAMP="T", USER_QUERY="q")
    assert not re.search(r"<([\w-]+)[^>]*>\s*</\1>", text), "no empty tags"
    assert "\n\n\n" not in text
    assert not text.startswith("\n") and not text.endswith("\n")
    # Explicitly empty values are the same as absent ones.
    assert assets.mode(mode).render_runtime(TIMESTAMP="T", USER_QUERY="q", **dict.fromkeys(OPTIONAL, "")) == text


@pytest.mark.parametrize("mode", sorted(MARKERS))
def test_present_sections_render_in_order(assets, mode):
    values = {name: f"<{name.lower()}>\nvalue of {name}\n</{name.lower()}>" for name in OPTIONAL}
    text = assets.mode(mode).render_runtime(TIMESTAMP="2025-12-02 14:33", USER_QUERY="q", **values)
    positions = [text.index(f"value of {name}") for name in OPTIONAL]
    assert positions == sorted(positions)
    assert text.index("2025-12-02 14:33") < text.index("<user_query>")
    assert text.startswith("<request_context>")
    assert "\n\n\n" not in text


@pytest.mark.parametrize(
    "query",
    ["{{ REQUEST_CONTEXT }}", "{{USER_QUERY}}", "{% if x %}y{% endif %}", "{# c #}", "a }} b {{ c", "{{ 7*7 }}"],
)
def test_user_text_is_never_expanded(assets, query):
    text = assets.mode("agent").render_runtime(
        TIMESTAMP="T", USER_QUERY=query, REQUEST_CONTEXT="<user_info>\n{{ TIMESTAMP }}\n</user_info>"
    )
    assert f"<user_query>\n{query}\n</user_query>" in text
    assert "<user_info>\n{{ TIMESTAMP }}\n</user_info>" in text
    assert "49" not in text


def test_required_placeholders_must_be_given(assets):
    mode = assets.mode("agent")
    with pytest.raises(ValueError, match="TIMESTAMP"):
        mode.render_runtime(USER_QUERY="q")
    with pytest.raises(ValueError, match="USER_QUERY"):
        mode.render_runtime(TIMESTAMP="T")


def test_unknown_placeholders_and_non_strings_are_rejected(assets):
    mode = assets.mode("ask")
    with pytest.raises(ValueError, match="OPEN_FILE"):
        mode.render_runtime(TIMESTAMP="T", USER_QUERY="q", OPEN_FILE="x")
    with pytest.raises(TypeError):
        mode.render_runtime(TIMESTAMP="T", USER_QUERY=None)  # type: ignore[arg-type]


def test_known_placeholders_a_template_does_not_use_are_accepted(assets):
    text = assets.mode("agent").render_runtime(TIMESTAMP="T", USER_QUERY="q", DEBUG_LOG_PATH="/tmp/log")
    assert "/tmp/log" not in text


def test_rendering_is_deterministic(assets):
    mode = assets.mode("plan")
    args = {"TIMESTAMP": "T", "USER_QUERY": "q", "OPEN_FILES": "<open>\nx\n</open>"}
    assert mode.render_runtime(**args) == mode.render_runtime(**args)
