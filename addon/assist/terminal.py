"""Terminal completion (`[features] terminal`): `AiService/StreamTerminalAutocomplete` (the ghost
text after what the user typed) and `AiService/GetTerminalCompletion` (a whole command), PROTOCOL 11.2.

    StreamTerminalAutocompleteRequest{current_command=1, command_history=2, model_name=3, git_diff=5,
        commit_history=6, past_results=7} -> stream StreamTerminalAutocompleteResponse{text=1, done_stream=2}
    GetTerminalCompletionRequest{the same, + user_platform=9, current_folder=10,
        current_folder_structure=11, relevant_files=12} -> GetTerminalCompletionResponse{command=1}

The model is asked for the whole command line. Autocomplete sends what follows the typed text (one
`text` frame, then `done_stream`); a command that does not continue what was typed is no suggestion
(only `done_stream`), never a rewrite of the user's input. Not confirmed: whether the client wants the
continuation or the whole line in `text`, the order of `command_history`, and what `past_results`
holds (shown to the model as earlier suggestions). `model_name` names Cursor's model and is ignored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from byok.proto import features_pb2 as fpb

from . import trim
from .call import CallContext, OneShot
from .llm import Ask, answer
from .prompts import PROMPTS
from .shared import clip, clip_all, configured

HISTORY = 20
COMMAND_CHARS = 400
DIFF_CHARS = 4_000
COMMITS = 10
FOLDER_ENTRIES = 100
FILES_CHARS = 6_000


def context_text(request: fpb.GetTerminalCompletionRequest | fpb.StreamTerminalAutocompleteRequest) -> str:
    parts: list[str] = []
    if isinstance(request, fpb.GetTerminalCompletionRequest):
        if request.user_platform:
            parts.append(f"Platform: {request.user_platform}")
        if request.current_folder:
            parts.append(f"Working directory: {request.current_folder}")
        entries = [e.name + ("/" if e.is_folder else "") for e in request.current_folder_structure[:FOLDER_ENTRIES]]
        if entries:
            parts.append("Files here: " + " ".join(entries))
        files = [f"{f.relative_workspace_path}:\n{f.contents}" for f in request.relevant_files]
        if files:
            parts.append("Relevant files:\n" + clip_all(files, FILES_CHARS, separator="\n\n"))
    if request.commit_history:
        parts.append("Recent commits:\n" + "\n".join(clip(c, 200) for c in request.commit_history[:COMMITS]))
    if request.git_diff.strip():
        parts.append("Uncommitted changes:\n" + clip(request.git_diff, DIFF_CHARS))
    if request.past_results:
        parts.append("Earlier suggestions:\n" + "\n".join(clip(r, COMMAND_CHARS) for r in request.past_results[-5:]))
    return "\n\n".join(parts)


def ask(request: fpb.GetTerminalCompletionRequest | fpb.StreamTerminalAutocompleteRequest) -> Ask:
    system, user = PROMPTS["terminal"].render(
        CURRENT_COMMAND=clip(request.current_command, COMMAND_CHARS),
        HISTORY="\n".join(clip(c, COMMAND_CHARS) for c in request.command_history[-HISTORY:]),
        CONTEXT=context_text(request),
    )
    return Ask("terminal", system, user)


def continuation(typed: str, command: str) -> str:
    """What the suggestion adds after the typed text; "" when it does not continue it."""
    if command.startswith(typed):
        return command[len(typed):]
    return ""


async def autocomplete(request: fpb.StreamTerminalAutocompleteRequest,
                       ctx: CallContext) -> AsyncIterator[fpb.StreamTerminalAutocompleteResponse]:
    command = await answer(ask(request), ctx, shape=trim.command, what="command")
    rest = continuation(request.current_command, command)
    if rest:
        yield fpb.StreamTerminalAutocompleteResponse(text=rest)
    yield fpb.StreamTerminalAutocompleteResponse(done_stream=True)


async def completion(request: fpb.GetTerminalCompletionRequest, ctx: CallContext) -> fpb.GetTerminalCompletionResponse:
    return fpb.GetTerminalCompletionResponse(command=await answer(ask(request), ctx, shape=trim.command, what="command"))


SERVICES = (
    OneShot(path="/aiserver.v1.AiService/StreamTerminalAutocomplete", feature="terminal",
            request_type=fpb.StreamTerminalAutocompleteRequest, response_type=fpb.StreamTerminalAutocompleteResponse,
            streaming=True, serve=autocomplete, **configured("terminal")),
    OneShot(path="/aiserver.v1.AiService/GetTerminalCompletion", feature="terminal",
            request_type=fpb.GetTerminalCompletionRequest, response_type=fpb.GetTerminalCompletionResponse,
            streaming=False, serve=completion, **configured("terminal")),
)
