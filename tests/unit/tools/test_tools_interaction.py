"""AskQuestion, CreatePlan, SwitchMode, WebFetch, WebSearch, GenerateImage: queries and result mapping."""

from __future__ import annotations

import json

import pytest

from byok.agent.cursor.tools import interaction as it
from byok.agent.cursor.tools.base import RunToolContext, ToolArgsError
from byok.wire.errors import ProtocolError
from byok.proto import agent_pb2 as apb
from byok.agent.web import WebTools
from tests.support.fake_call_io import FakeCallIO, run_tool
from tests.support.web_walk import walk_client

CTX = RunToolContext(conversation_id="c", workspace_paths=("/ws",), mode="plan",
                     web=WebTools(http=walk_client()[0]))  # the redirect walk answers 200, offline
R = apb.InteractionResponse


def fake(*replies) -> FakeCallIO:
    io = FakeCallIO(context=CTX)
    for r in replies:
        io.reply(r)
    return io


QUESTIONS = {"title": "Setup", "questions": [
    {"id": "db", "prompt": "Which database?", "options": [{"id": "pg", "label": "Postgres"}, {"id": "sq", "label": "SQLite"}]},
    {"id": "x", "prompt": "Extras?", "allow_multiple": True,
     "options": [{"id": "a", "label": "Auth"}, {"id": "b", "label": "Billing"}]}]}


def test_ask_question_query_and_answers():
    answers = apb.AskQuestionSuccess(answers=[
        apb.AskQuestionSuccess.Answer(question_id="db", selected_option_ids=["sq"]),
        apb.AskQuestionSuccess.Answer(question_id="x", selected_option_ids=["a", "b"], freeform_text="later")])
    result = apb.AskQuestionResult(success=answers)
    io = fake(("ask_question_interaction_response", apb.AskQuestionInteractionResponse(result=result)))
    card, out = run_tool(it.ASK_QUESTION, QUESTIONS, io)
    (q,) = io.queries
    assert (q.field, q.id) == ("ask_question_interaction_query", 1)
    assert q.message.ask_question_interaction_query == apb.AskQuestionInteractionQuery(args=card, tool_call_id=io.call_id)
    assert card.questions[1].allow_multiple and card.questions[0].options[1].label == "SQLite"
    assert out.result == result and not out.is_error
    assert json.loads(out.content) == {"answers": [
        {"question_id": "db", "question": "Which database?", "selected": ["SQLite"]},
        {"question_id": "x", "question": "Extras?", "selected": ["Auth", "Billing"], "freeform_text": "later"}]}


@pytest.mark.parametrize("result,content", [
    (apb.AskQuestionResult(rejected=apb.AskQuestionRejected(reason="skip")), "The user declined to answer: skip"),
    (apb.AskQuestionResult(error=apb.AskQuestionError(error_message="boom")), "AskQuestion failed: boom"),
])
def test_ask_question_rejected_and_error(result, content):
    io = fake(("ask_question_interaction_response", apb.AskQuestionInteractionResponse(result=result)))
    _, out = run_tool(it.ASK_QUESTION, QUESTIONS, io)
    assert out.is_error and out.content == content and out.result == result


def test_ask_question_empty_result_and_wrong_response_are_protocol_errors():
    with pytest.raises(ProtocolError, match="AskQuestionResult has no result set"):
        run_tool(it.ASK_QUESTION, QUESTIONS, fake(("ask_question_interaction_response", apb.AskQuestionInteractionResponse())))
    with pytest.raises(ProtocolError):
        run_tool(it.ASK_QUESTION, QUESTIONS, fake(("switch_mode_request_response", apb.SwitchModeRequestResponse())))


@pytest.mark.parametrize("raw,message", [
    ({}, "missing questions"),
    ({"questions": []}, "at least 1"),
    ({"questions": [{"id": "a", "prompt": "p", "options": [{"id": "1", "label": "x"}]}]}, "at least 2"),
    ({"questions": [{"id": "a", "prompt": "p", "options": [{"id": "1", "label": "x"}, {"id": "1", "label": "y"}]}]},
     "more than once"),
    ({"questions": [{"prompt": "p", "options": []}]}, "missing questions\\[0\\].id"),
])
def test_ask_question_args_errors(raw, message):
    with pytest.raises(ToolArgsError, match=message):
        it.ASK_QUESTION.parse(raw, "c", CTX)


PLAN = {"name": "Retry", "overview": "Add retries", "plan": "# Plan\n...", "todos": [
    {"id": "t1", "content": "Write client"}, {"id": "t2", "content": "Test", "dependencies": ["t1"]}]}


def test_create_plan():
    result = apb.CreatePlanResult(success=apb.CreatePlanSuccess(), plan_uri="file:///ws/.cursor/plans/retry.md")
    io = fake(("create_plan_request_response", apb.CreatePlanRequestResponse(result=result)))
    card, out = run_tool(it.CREATE_PLAN, PLAN, io)
    assert card.todos[1] == apb.TodoItem(id="t2", content="Test", status=apb.TODO_STATUS_PENDING, dependencies=["t1"])
    assert io.queries[0].message.create_plan_request_query == apb.CreatePlanRequestQuery(args=card, tool_call_id=io.call_id)
    assert out.result == result and not out.is_error
    assert out.content == ('The plan "Retry" was created (file:///ws/.cursor/plans/retry.md); '
                           "the user can review, edit and build it.")
    err = apb.CreatePlanResult(error=apb.CreatePlanError(error="no"))
    _, out = run_tool(it.CREATE_PLAN, PLAN, fake(("create_plan_request_response", apb.CreatePlanRequestResponse(result=err))))
    assert out.is_error and out.content == "CreatePlan failed: no"
    with pytest.raises(ToolArgsError, match="depends on 'zz'"):
        it.CREATE_PLAN.parse({**PLAN, "todos": [{"id": "a", "content": "x", "dependencies": ["zz"]}]}, "c", CTX)
    with pytest.raises(ToolArgsError, match="missing plan"):
        it.CREATE_PLAN.parse({"name": "n", "overview": "o"}, "c", CTX)


def test_switch_mode_approved_and_rejected():
    ok = apb.SwitchModeRequestResponse(approved=apb.SwitchModeRequestResponse.Approved())
    io = fake(("switch_mode_request_response", ok))
    card, out = run_tool(it.SWITCH_MODE, {"target_mode_id": "agent", "explanation": "Ready to build"}, io)
    assert card == apb.SwitchModeArgs(target_mode_id="agent", explanation="Ready to build", tool_call_id=io.call_id)
    assert io.queries[0].message.switch_mode_request_query == apb.SwitchModeRequestQuery(args=card)
    assert out.result == apb.SwitchModeResult(success=apb.SwitchModeSuccess(from_mode_id="plan", to_mode_id="agent"))
    assert out.content == "The user approved: switched from plan mode to agent mode." and not out.is_error
    no = apb.SwitchModeRequestResponse(rejected=apb.SwitchModeRequestResponse.Rejected(reason="stay"))
    _, out = run_tool(it.SWITCH_MODE, {"target_mode_id": "agent"}, fake(("switch_mode_request_response", no)))
    assert out.is_error and out.result == apb.SwitchModeResult(rejected=apb.SwitchModeRejected(reason="stay"))
    assert out.content == "The user declined switching to agent mode: stay"
    with pytest.raises(ToolArgsError, match="missing target_mode_id"):
        it.SWITCH_MODE.parse({}, "c", CTX)


APPROVED_FETCH = ("web_fetch_request_response", apb.WebFetchRequestResponse(approved=apb.WebFetchRequestResponse.Approved()))


def test_web_fetch_approval_then_exec():
    fetched = apb.FetchResult(success=apb.FetchSuccess(url="https://93.184.215.14/a", content="# Title\nbody", status_code=200,
                                                       content_type="text/markdown"))
    io = fake(APPROVED_FETCH, ("fetch_result", fetched))
    card, out = run_tool(it.WEB_FETCH, {"url": "https://93.184.215.14/a"}, io)
    assert card == apb.WebFetchArgs(url="https://93.184.215.14/a", tool_call_id=io.call_id)
    query, exec_ = io.sent
    assert (query.kind, query.id, exec_.kind, exec_.id) == ("query", 1, "exec", 2)
    assert query.message.web_fetch_request_query == apb.WebFetchRequestQuery(args=card, skip_approval=False)
    assert exec_.message.fetch_args == apb.FetchArgs(url="https://93.184.215.14/a", tool_call_id=io.call_id)
    assert out.result == apb.WebFetchResult(success=apb.WebFetchSuccess(url="https://93.184.215.14/a", markdown="# Title\nbody"))
    assert out.content == "URL: https://93.184.215.14/a\nStatus: 200 (text/markdown)\n\n# Title\nbody" and not out.is_error


def test_web_fetch_rejected_and_error():
    no = ("web_fetch_request_response", apb.WebFetchRequestResponse(rejected=apb.WebFetchRequestResponse.Rejected()))
    io = fake(no)
    _, out = run_tool(it.WEB_FETCH, {"url": "http://93.184.215.14"}, io)
    assert len(io.sent) == 1 and out.is_error
    assert out.result == apb.WebFetchResult(rejected=apb.WebFetchRejected())
    assert out.content == "The user declined fetching http://93.184.215.14"
    err = apb.FetchResult(error=apb.FetchError(url="http://93.184.215.14", error="timeout"))
    _, out = run_tool(it.WEB_FETCH, {"url": "http://93.184.215.14"}, fake(APPROVED_FETCH, ("fetch_result", err)))
    assert out.is_error and out.result == apb.WebFetchResult(error=apb.WebFetchError(url="http://93.184.215.14", error="timeout"))
    assert out.content == "Fetching http://93.184.215.14 failed: timeout"
    for bad in ("ftp://x", "x.dev", "https://"):
        with pytest.raises(ToolArgsError, match="invalid url"):
            it.WEB_FETCH.parse({"url": bad}, "c", CTX)


def test_web_search_not_configured_after_approval():
    ok = ("web_search_request_response", apb.WebSearchRequestResponse(approved=apb.WebSearchRequestResponse.Approved()))
    io = fake(ok)
    card, out = run_tool(it.WEB_SEARCH, {"search_term": "python 3.13 release", "explanation": "why"}, io)
    assert card == apb.WebSearchArgs(search_term="python 3.13 release", tool_call_id=io.call_id)
    assert io.queries[0].message.web_search_request_query == apb.WebSearchRequestQuery(args=card)
    assert len(io.sent) == 1 and out.is_error
    assert out.content == "WebSearch is not configured in cursor-byok (no [web_search] in the providers file)"
    assert out.result == apb.WebSearchResult(error=apb.WebSearchError(error=out.content))
    no = ("web_search_request_response", apb.WebSearchRequestResponse(rejected=apb.WebSearchRequestResponse.Rejected(reason="no")))
    _, out = run_tool(it.WEB_SEARCH, {"search_term": "q"}, fake(no))
    assert out.is_error and out.result == apb.WebSearchResult(rejected=apb.WebSearchRejected(reason="no"))
    assert out.content == "The user declined the web search for 'q': no"


def test_generate_image_not_configured_after_approval():
    ok = ("generate_image_request_response",
          apb.GenerateImageRequestResponse(approved=apb.GenerateImageRequestResponse.Approved(description="cat")))
    io = fake(ok)
    card, out = run_tool(it.GENERATE_IMAGE, {"description": "a cat", "file_path": "img/cat.png", "image_data": "AAAA"}, io)
    assert card == apb.GenerateImageArgs(description="a cat", file_path="/ws/img/cat.png")
    assert io.queries[0].message.generate_image_request_query == apb.GenerateImageRequestQuery(args=card, tool_call_id=io.call_id)
    assert out.is_error and out.content.startswith("GenerateImage is not configured in cursor-byok")
    no = ("generate_image_request_response",
          apb.GenerateImageRequestResponse(rejected=apb.GenerateImageRequestResponse.Rejected(reason="meh")))
    _, out = run_tool(it.GENERATE_IMAGE, {"description": "x"}, fake(no))
    assert out.is_error and out.content == "The user declined generating the image: meh"
    assert out.result == apb.GenerateImageResult(error=apb.GenerateImageError(error=out.content))
    with pytest.raises(ToolArgsError, match="missing description"):
        it.GENERATE_IMAGE.parse({}, "c", CTX)
