"""Fuzzed decoders of Cursor's other AI calls (issue 23): every bad input is a typed error, never an
unhandled exception.

Targets (each at least FUZZ_CASES generated cases, counted and asserted):
  assist_requests    any request message of each service -> its prompt, or ProtocolError
  assist_answers     any model answer -> the trimmed answer (branch names valid for Git); the streamed
                     Cmd-K filter gives the same text however the answer is cut into pieces
  features_view      any body of the one-shot RPCs and IsConnected through the content view -> never raises
  features_config    any [features] table -> a config whose every name resolves, or ConfigFileError

Run: `pytest -m fuzz tests/fuzz`. FUZZ_CASES (default 10000) scales it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import strategies as st

from byok.assist import SERVICES, cmdk, commit, names, terminal, titles, trim
from byok.providers.config import FEATURES, ConfigFileError, parse_providers
from byok.proto import agent_pb2 as apb, features_pb2 as fpb
from byok.wire.errors import ProtocolError
from tests.fuzz.test_fuzz_decoders import envelope, envelope_streams, fuzz, proto_message

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]

OURS = [s for s in SERVICES if s.feature in ("commit_message", "branch_name", "chat_title", "terminal", "cmd_k")]


def prompt_of(request):
    """The pure half of each service: the request read into what the model is asked."""
    match request:
        case fpb.WriteGitCommitMessageRequest():
            return commit.ask(request)
        case fpb.WriteGitBranchNameRequest():
            return names.ask(request)
        case fpb.GetChatTitleRequest():
            return titles.ask(titles.conversation_text(request.conversation), "GetChatTitle")
        case fpb.NameTabRequest():
            return titles.ask(titles.conversation_text(request.messages), "NameTab")
        case fpb.NameAgentRequest() | apb.NameAgentRequest():
            return titles.ask(f"User: {request.user_message}" if request.user_message.strip() else "", "NameAgent")
        case fpb.StreamTerminalAutocompleteRequest() | fpb.GetTerminalCompletionRequest():
            return terminal.ask(request)
        case fpb.StreamCmdKRequest():
            return cmdk.missing_hashes(request.context_items) or cmdk.editor_prompt(cmdk.read_editor(request))
        case fpb.StreamTerminalCmdKRequest():
            return cmdk.missing_hashes(request.context_items) or cmdk.terminal_prompt(cmdk.read_terminal(request))
    raise AssertionError(f"no service reads {type(request).__name__}")


@st.composite
def requests(draw):
    service = draw(st.sampled_from(OURS))
    if draw(st.integers(0, 4)) == 0:  # raw bytes: the decoder itself (the transport answers invalid_argument)
        raw = draw(st.binary(max_size=60))
        try:
            return service, service.request_type.FromString(raw)
        except Exception:  # DecodeError: the typed error the transport turns into invalid_argument
            return service, service.request_type()
    return service, draw(proto_message(service.request_type.DESCRIPTOR))


def test_fuzz_assist_requests():
    from byok.providers.config import ProvidersConfig

    empty = ProvidersConfig()

    def check(value):
        service, request = value
        assert service.route_for(request, empty) is None and service.may_answer(empty) is False
        try:
            asked = prompt_of(request)
        except ProtocolError:
            return
        if isinstance(asked, list):  # Cmd-K: the hashes it asks the client for
            assert all(isinstance(h, str) for h in asked)
        else:
            assert asked.system and asked.user and asked.purpose == service.feature

    fuzz("assist_requests", requests(), check)


_PIECES = st.sampled_from([
    "```", "```python", "~~~", "\n", "\n\n", "<think>", "</think>", "<thinking>", "Commit message:",
    "Here is the code:", "Title:", '"', "'", "`", "“", "”", "$ ", "> ", "PS C:\\> ", "..", ".lock", "/", "@{",
    "-", " ", "feat: add x", "  return 1", "HEAD", "\\", "~^:?*[",
])
answers = st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=12).map("".join)


@st.composite
def answers_and_cuts(draw):
    text = draw(answers)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    return text, cuts


def stream(text: str, cuts: list[int]) -> str:
    f = trim.FenceFilter()
    out, start = [], 0
    for cut in [*cuts, len(text)]:
        out.append(f.feed(text[start:cut]))
        start = cut
    return "".join(out) + f.finish()


def test_fuzz_assist_answers():
    def check(value):
        text, cuts = value
        for shape in (trim.commit_message, trim.title, trim.command, trim.one_line):
            assert isinstance(shape(text), str)
        name = trim.branch_name(text)
        assert name == "" or trim.is_valid_branch_name(name), name
        whole = stream(text, [])
        assert stream(text, cuts) == whole
        assert stream(text, list(range(len(text)))) == whole

    fuzz("assist_answers", answers_and_cuts(), check)


def test_fuzz_features_content_view():
    from byok import contentview as cv

    paths = sorted([*cv.UNARY_MESSAGES, *cv.STREAM_MESSAGES])

    @st.composite
    def bodies(draw):
        path = draw(st.sampled_from(paths))
        classes = cv.UNARY_MESSAGES.get(path) or cv.STREAM_MESSAGES[path]
        message_class = classes[draw(st.integers(0, 1))]
        choice = draw(st.integers(0, 3))
        if choice == 0:
            body = draw(st.binary(max_size=80))
        elif choice == 1:
            body = draw(envelope_streams())[0]
        else:
            body = draw(proto_message(message_class.DESCRIPTOR)).SerializeToString()
            if choice == 3:
                body = envelope(body) + draw(st.sampled_from([b"", envelope(b"{}", 2), b"\x00"]))
        return path, message_class, body

    def check(value):
        path, message_class, body = value
        for content_type in (None, "application/proto", "application/json", "application/connect+proto"):
            assert isinstance(cv.render_unary(body, message_class, content_type), list)
        assert isinstance(list(cv.iter_envelopes(body, message_class.FromString, {})), list)

    fuzz("features_view", bodies(), check)


MODELS = """
[[providers]]
name = "p"
kind = "openai_chat"
base_url = "https://x.example/v1"
api_key = "k"
[[providers.models]]
id = "m"
[[providers.models]]
id = "org/m2"
"""
_KEYS = st.sampled_from([*FEATURES, "default", "commit", "Default", ""])
_REFS = st.one_of(st.sampled_from(["p/m", "p/org/m2", "p/", "/m", "m", "q/m", "p//m", ""]), st.text(max_size=8),
                  st.integers(), st.booleans(), st.lists(st.text(max_size=3), max_size=2))


def test_fuzz_features_config():
    @st.composite
    def tables(draw):
        entries = draw(st.dictionaries(_KEYS, _REFS, max_size=6))
        body = "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in entries.items())
        return MODELS + "\n[features]\n" + body + "\n"

    def check(text):
        try:
            config, _ = parse_providers(text, "fuzz.toml")
        except ConfigFileError as e:
            assert str(e).startswith("fuzz.toml")
            return
        for feature in FEATURES:
            public_id = config.features.public_id(feature)
            assert public_id is None or config.feature_route(feature) is not None

    fuzz("features_config", tables(), check)
