"""Interaction tools: the user answers an `InteractionQuery` (PROTOCOL 5.6, seed §26.13).

- AskQuestion, CreatePlan, SwitchMode: the response carries the tool's result (terminal).
- WebFetch: a URL on a non-public address is refused before anything is asked (web/fetch.py); else
  the response is only approved/rejected; approved -> `fetch_args` exec (Cursor fetches the page)
  -> the content, size-capped, HTML reduced to its readable text -> WebFetchResult.
- WebSearch: approved/rejected; approved -> the configured search backend (web/search.py) ->
  WebSearchResult references (title, URL, snippet) and a numbered list for the model.
- GenerateImage: approved/rejected; approved -> the configured images endpoint (web/images.py) ->
  the image written into the workspace with a `write_args` exec -> GenerateImageResult.
  WebSearch and GenerateImage are offered only when their backend is configured; a run that calls
  one anyway (an older conversation's tool list) gets an explicit "not configured" error result.
A rejection is always a typed terminal result with is_error (the model learns the user declined).
"""

from __future__ import annotations

import asyncio
import base64
import re
from urllib.parse import urlsplit

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from ....wire.errors import ProtocolError
from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, cap_head, dumps, resolve_path, variant

WEB_SEARCH_NOT_CONFIGURED = "WebSearch is not configured in cursor-byok (no [web_search] in the providers file)"
GENERATE_IMAGE_NOT_CONFIGURED = (
    "GenerateImage is not configured in cursor-byok (no [image_generation] in the providers file)"
)


def _because(reason: str) -> str:
    return f": {reason}" if reason else ""


def _unique(ids: set[str], value: str, what: str) -> None:
    if value in ids:
        raise ToolArgsError(f"invalid {what}: the id {value!r} appears more than once")
    ids.add(value)


# ---- AskQuestion --------------------------------------------------------------------------------


def _parse_ask(raw: dict, call_id: str, ctx: RunToolContext) -> apb.AskQuestionArgs:
    a = Args(raw)
    args = apb.AskQuestionArgs(title=a.string("title") or "")
    question_ids: set[str] = set()
    for q in a.objects("questions", required=True, min_items=1):
        question = args.questions.add(id=q.string("id", required=True, non_empty=True),
                                      prompt=q.string("prompt", required=True, non_empty=True),
                                      allow_multiple=bool(q.boolean("allow_multiple")))
        _unique(question_ids, question.id, "questions")
        option_ids: set[str] = set()
        for o in q.objects("options", required=True, min_items=2):
            option = question.options.add(id=o.string("id", required=True, non_empty=True),
                                          label=o.string("label", required=True, non_empty=True))
            _unique(option_ids, option.id, f"{q.where}.options")
    return args


def _answers_json(card: apb.AskQuestionArgs, success: apb.AskQuestionSuccess) -> str:
    questions = {q.id: q for q in card.questions}
    answers = []
    for ans in success.answers:
        q = questions.get(ans.question_id)
        labels = {o.id: o.label for o in q.options} if q else {}
        item = {"question_id": ans.question_id, "question": q.prompt if q else "",
                "selected": [labels.get(i, i) for i in ans.selected_option_ids]}
        if ans.freeform_text:
            item["freeform_text"] = ans.freeform_text
        answers.append(item)
    return dumps({"answers": answers})


def answers_text(card: apb.AskQuestionArgs, result: apb.AskQuestionResult) -> str:
    """What the model reads for an AskQuestion result that arrives later (an async completion)."""
    kind = result.WhichOneof("result")
    if kind == "success":
        return _answers_json(card, result.success)
    if kind == "rejected":
        return "The user declined to answer" + _because(result.rejected.reason)
    if kind == "error":
        return "AskQuestion failed" + _because(result.error.error_message)
    raise ProtocolError(f"the AskQuestion completion carries no answers (result {kind!r})")


async def _run_ask(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, response = await io.query("ask_question_interaction_query",
                                 apb.AskQuestionInteractionQuery(args=card, tool_call_id=io.call_id),
                                 results=frozenset({"ask_question_interaction_response"}))
    result = response.result
    kind = variant(result, "result", "AskQuestionResult")
    if kind == "success":
        return ToolOutcome(result, _answers_json(card, result.success))
    if kind == "async":
        return ToolOutcome(result, "The questions were shown to the user; the answers will arrive later.")
    if kind == "rejected":
        return ToolOutcome(result, "The user declined to answer" + _because(result.rejected.reason), is_error=True)
    return ToolOutcome(result, "AskQuestion failed" + _because(result.error.error_message), is_error=True)


ASK_QUESTION = ToolDef("AskQuestion", "interaction", "ask_question_tool_call", _parse_ask, _run_ask,
                       lambda message: apb.AskQuestionResult(error=apb.AskQuestionError(error_message=message)))


# ---- CreatePlan ---------------------------------------------------------------------------------


def _parse_plan(raw: dict, call_id: str, ctx: RunToolContext) -> apb.CreatePlanArgs:
    a = Args(raw)
    args = apb.CreatePlanArgs(name=a.string("name", required=True, non_empty=True),
                              overview=a.string("overview", required=True, non_empty=True),
                              plan=a.string("plan", required=True, non_empty=True))
    ids: set[str] = set()
    for t in a.objects("todos") or []:
        todo = args.todos.add(id=t.string("id", required=True, non_empty=True),
                              content=t.string("content", required=True, non_empty=True),
                              status=apb.TODO_STATUS_PENDING, dependencies=t.str_list("dependencies") or [])
        _unique(ids, todo.id, "todos")
    for todo in args.todos:
        for dep in todo.dependencies:
            if dep not in ids:
                raise ToolArgsError(f"invalid todos: {todo.id!r} depends on {dep!r}, which is not a todo of this plan")
    return args


async def _run_plan(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, response = await io.query("create_plan_request_query",
                                 apb.CreatePlanRequestQuery(args=card, tool_call_id=io.call_id),
                                 results=frozenset({"create_plan_request_response"}))
    result = response.result
    kind = variant(result, "result", "CreatePlanResult")
    if kind == "success":
        where = f" ({result.plan_uri})" if result.plan_uri else ""
        return ToolOutcome(result, f'The plan "{card.name}" was created{where}; the user can review, edit and build it.')
    return ToolOutcome(result, "CreatePlan failed" + _because(result.error.error), is_error=True)


CREATE_PLAN = ToolDef("CreatePlan", "interaction", "create_plan_tool_call", _parse_plan, _run_plan,
                      lambda message: apb.CreatePlanResult(error=apb.CreatePlanError(error=message)))


# ---- SwitchMode ---------------------------------------------------------------------------------


SWITCH_TARGETS = ("agent", "ask", "plan", "debug", "multitask")
"""The chat modes a conversation can be switched to (each has prompt assets; subagent is not a chat mode)."""


def _parse_switch(raw: dict, call_id: str, ctx: RunToolContext) -> apb.SwitchModeArgs:
    a = Args(raw)
    target = a.string("target_mode_id", required=True, non_empty=True).strip().lower()
    if target not in SWITCH_TARGETS:
        raise ToolArgsError(f"invalid target_mode_id: {target!r} is not a mode; use one of {', '.join(SWITCH_TARGETS)}")
    if target == ctx.mode:
        raise ToolArgsError(f"invalid target_mode_id: the conversation is already in {target} mode")
    args = apb.SwitchModeArgs(target_mode_id=target, tool_call_id=call_id)
    explanation = a.string("explanation")
    if explanation is not None:
        args.explanation = explanation
    return args


async def _run_switch(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, response = await io.query("switch_mode_request_query", apb.SwitchModeRequestQuery(args=card),
                                 results=frozenset({"switch_mode_request_response"}))
    kind = variant(response, "result", "SwitchModeRequestResponse")
    target, current = card.target_mode_id, io.context.mode
    if kind == "approved":
        result = apb.SwitchModeResult(success=apb.SwitchModeSuccess(from_mode_id=current, to_mode_id=target))
        return ToolOutcome(result, f"The user approved: switched from {current} mode to {target} mode.")
    reason = response.rejected.reason
    result = apb.SwitchModeResult(rejected=apb.SwitchModeRejected(reason=reason))
    return ToolOutcome(result, f"The user declined switching to {target} mode{_because(reason)}", is_error=True)


SWITCH_MODE = ToolDef("SwitchMode", "interaction", "switch_mode_tool_call", _parse_switch, _run_switch,
                      lambda message: apb.SwitchModeResult(error=apb.SwitchModeError(error=message)))


# ---- WebFetch (approval, then a fetch exec) -------------------------------------------------------


def _parse_fetch(raw: dict, call_id: str, ctx: RunToolContext) -> apb.WebFetchArgs:
    url = Args(raw).string("url", required=True, non_empty=True).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ToolArgsError(f"invalid url: {url!r} is not an absolute http(s) URL")
    return apb.WebFetchArgs(url=url, tool_call_id=call_id)


def _web(io: CallIO):
    from ...web import WebTools

    return io.context.web or WebTools()


def _fetch_refused(url: str, message: str) -> ToolOutcome:
    return ToolOutcome(apb.WebFetchResult(error=apb.WebFetchError(url=url, error=message)), message, is_error=True)


async def _run_fetch(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    from ...web.fetch import FetchRefused, is_html, readable_text

    url = card.url
    web = _web(io)
    try:
        await web.fetch.check(url)
    except FetchRefused as e:
        return _fetch_refused(url, str(e))
    _, response = await io.query("web_fetch_request_query", apb.WebFetchRequestQuery(args=card, skip_approval=False),
                                 results=frozenset({"web_fetch_request_response"}))
    if variant(response, "result", "WebFetchRequestResponse") == "rejected":
        reason = response.rejected.reason
        return ToolOutcome(apb.WebFetchResult(rejected=apb.WebFetchRejected(reason=reason)),
                           f"The user declined fetching {url}{_because(reason)}", is_error=True)
    try:  # the redirects, checked hop by hop before anything follows them; Cursor gets where they end
        target = await web.fetch.follow(url, web.http)
    except FetchRefused as e:
        return _fetch_refused(url, str(e))
    # Approval is not a result: the same call continues as the fetch exec (no card, no checkpoint).
    _, fetched = await io.exec("fetch_args", apb.FetchArgs(url=target, tool_call_id=io.call_id),
                               results=frozenset({"fetch_result"}))
    if variant(fetched, "result", "FetchResult") == "error":
        error = fetched.error.error
        return ToolOutcome(apb.WebFetchResult(error=apb.WebFetchError(url=url, error=error)),
                           f"Fetching {url} failed{_because(error)}", is_error=True)
    s = fetched.success
    final = s.url or target
    if final != target:  # Cursor was redirected further: the guard applies to where it ended up too
        try:
            await web.fetch.check(final)
        except FetchRefused as e:
            return _fetch_refused(url, f"{url} redirected to {e}")
    content, cut = web.fetch.cap(s.content)
    if is_html(content, s.content_type):
        text = await asyncio.to_thread(readable_text, content, final)  # parsing is CPU work
        text = text.strip() if text else "(the page has no readable text)"
    else:
        text = content
    if cut:
        text += f"\n\n[The page is larger than {web.fetch.max_bytes // 1024} KB; only its start was read.]"
    result = apb.WebFetchResult(success=apb.WebFetchSuccess(url=final, markdown=text))
    head = f"URL: {final}\nStatus: {s.status_code}" + (f" ({s.content_type})" if s.content_type else "")
    return ToolOutcome(result, cap_head(f"{head}\n\n{text}"))


WEB_FETCH = ToolDef("WebFetch", "interaction", "web_fetch_tool_call", _parse_fetch, _run_fetch,
                    lambda message: apb.WebFetchResult(error=apb.WebFetchError(error=message)))


# ---- WebSearch / GenerateImage (approval, then "not configured") ---------------------------------


def _parse_search(raw: dict, call_id: str, ctx: RunToolContext) -> apb.WebSearchArgs:
    a = Args(raw)
    a.string("explanation")
    return apb.WebSearchArgs(search_term=a.string("search_term", required=True, non_empty=True), tool_call_id=call_id)


async def _run_search(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, response = await io.query("web_search_request_query", apb.WebSearchRequestQuery(args=card),
                                 results=frozenset({"web_search_request_response"}))
    if variant(response, "result", "WebSearchRequestResponse") == "rejected":
        reason = response.rejected.reason
        return ToolOutcome(apb.WebSearchResult(rejected=apb.WebSearchRejected(reason=reason)),
                           f"The user declined the web search for {card.search_term!r}{_because(reason)}", is_error=True)
    from ...web.search import SearchFailed, results_text

    web = _web(io)
    if web.search is None or web.http is None:
        return ToolOutcome(apb.WebSearchResult(error=apb.WebSearchError(error=WEB_SEARCH_NOT_CONFIGURED)),
                           WEB_SEARCH_NOT_CONFIGURED, is_error=True)
    try:
        hits = await web.search.search(web.http, card.search_term)
    except SearchFailed as e:
        message = f"The web search for {card.search_term!r} failed: {e}"
        return ToolOutcome(apb.WebSearchResult(error=apb.WebSearchError(error=message)), message, is_error=True)
    references = [apb.WebSearchReference(title=h.title, url=h.url, chunk=h.snippet) for h in hits]
    return ToolOutcome(apb.WebSearchResult(success=apb.WebSearchSuccess(references=references)),
                       results_text(card.search_term, hits))


WEB_SEARCH = ToolDef("WebSearch", "interaction", "web_search_tool_call", _parse_search, _run_search,
                     lambda message: apb.WebSearchResult(error=apb.WebSearchError(error=message)))


def _parse_image(raw: dict, call_id: str, ctx: RunToolContext) -> apb.GenerateImageArgs:
    a = Args(raw)
    args = apb.GenerateImageArgs(description=a.string("description", required=True, non_empty=True))
    path = a.string("file_path", non_empty=True)
    if path is not None:
        args.file_path = resolve_path(path, ctx.workspace)
    a.string("image_data")  # validated only: GenerateImageArgs has no field for inline image data
    return args


def _image_error(message: str) -> apb.GenerateImageResult:
    return apb.GenerateImageResult(error=apb.GenerateImageError(error=message))


async def _run_image(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    _, response = await io.query("generate_image_request_query",
                                 apb.GenerateImageRequestQuery(args=card, tool_call_id=io.call_id),
                                 results=frozenset({"generate_image_request_response"}))
    if variant(response, "result", "GenerateImageRequestResponse") == "rejected":
        # GenerateImageResult has no rejected branch: the refusal is its error.
        message = "The user declined generating the image" + _because(response.rejected.reason)
        return ToolOutcome(_image_error(message), message, is_error=True)
    from ...web.images import ImageFailed

    web = _web(io)
    if web.images is None or web.http is None:
        return ToolOutcome(_image_error(GENERATE_IMAGE_NOT_CONFIGURED), GENERATE_IMAGE_NOT_CONFIGURED, is_error=True)
    try:
        image = await web.images.generate(web.http, card.description)
    except ImageFailed as e:
        message = f"Generating the image failed: {e}"
        return ToolOutcome(_image_error(message), message, is_error=True)
    extension = image.mime_type.split("/", 1)[1].replace("jpeg", "jpg")
    path = card.file_path or _default_image_path(io, card.description, extension)
    _, written = await io.exec("write_args", apb.WriteArgs(path=path, file_bytes=image.data, tool_call_id=io.call_id),
                               results=frozenset({"write_result"}))
    kind = variant(written, "result", "WriteResult")
    if kind != "success":
        detail = getattr(getattr(written, kind), "error", "") or kind.replace("_", " ")
        message = f"The image was generated but could not be saved to {path}: {detail}"
        return ToolOutcome(_image_error(message), message, is_error=True)
    result = apb.GenerateImageResult(success=apb.GenerateImageSuccess(
        file_path=path, image_data=base64.b64encode(image.data).decode("ascii")))
    content = f"Generated the image and saved it to {path} ({image.mime_type}, {len(image.data)} bytes)."
    if image.revised_prompt:
        content += f"\nThe image model used this prompt: {image.revised_prompt}"
    return ToolOutcome(result, content)


def _default_image_path(io: CallIO, description: str, extension: str) -> str:
    slug = "-".join(re.findall(r"[a-z0-9]+", description.lower())[:6]) or "image"
    suffix = re.sub(r"[^A-Za-z0-9]", "", io.call_id)[-6:]
    name = f"generated-images/{slug}-{suffix}.{extension}" if suffix else f"generated-images/{slug}.{extension}"
    return resolve_path(name, io.context.workspace)


GENERATE_IMAGE = ToolDef("GenerateImage", "interaction", "generate_image_tool_call", _parse_image, _run_image,
                         _image_error)
