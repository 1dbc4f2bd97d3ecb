"""`AiService/WriteGitCommitMessage`: a commit message for the staged diff, in the repository's own
style (PROTOCOL 11.2).

    WriteGitCommitMessageRequest{diffs=1 repeated, previous_commit_messages=2 repeated, explicit_context=3}
      -> WriteGitCommitMessageResponse{commit_message=1}

Unary; the client gives up after about 10 s, so the prompt stays small (the diff is cut to
`DIFF_CHARS`) and the call keeps the client's `connect-timeout-ms` (llm.answer). The order of
`previous_commit_messages` is not confirmed; they are shown as the client sends them.
"""

from __future__ import annotations

from byok.proto import features_pb2 as fpb

from ..wire.errors import ProtocolError
from . import trim
from .call import CallContext, OneShot
from .llm import Ask, answer
from .prompts import PROMPTS
from .shared import clip, clip_all, configured, explicit_context

PATH = "/aiserver.v1.AiService/WriteGitCommitMessage"
DIFF_CHARS = 24_000
PREVIOUS_MESSAGES = 12
MESSAGE_CHARS = 600


def ask(request: fpb.WriteGitCommitMessageRequest) -> Ask:
    if not any(d.strip() for d in request.diffs):
        raise ProtocolError("WriteGitCommitMessage without a diff: nothing to describe")
    previous = [clip(m.strip(), MESSAGE_CHARS) for m in request.previous_commit_messages[:PREVIOUS_MESSAGES]]
    system, user = PROMPTS["commit_message"].render(
        DIFFS=clip_all(request.diffs, DIFF_CHARS),
        PREVIOUS_MESSAGES="\n---\n".join(m for m in previous if m),
        CONTEXT=explicit_context(request.explicit_context),
    )
    return Ask("commit_message", system, user)


async def serve(request: fpb.WriteGitCommitMessageRequest, ctx: CallContext) -> fpb.WriteGitCommitMessageResponse:
    text = await answer(ask(request), ctx, shape=trim.commit_message, what="commit message")
    return fpb.WriteGitCommitMessageResponse(commit_message=text)


SERVICES = (
    OneShot(path=PATH, feature="commit_message", request_type=fpb.WriteGitCommitMessageRequest,
            response_type=fpb.WriteGitCommitMessageResponse, streaming=False, serve=serve,
            **configured("commit_message")),
)
