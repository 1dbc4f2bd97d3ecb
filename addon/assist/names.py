"""`AiService/WriteGitBranchName`: a branch name for the work at hand, in Git's rules for ref names
(PROTOCOL 11.2).

    WriteGitBranchNameRequest{diffs=1 string, context=2 optional, conversation_id=3 optional}
      -> WriteGitBranchNameResponse{branch_name=1}

The model's answer is made a valid name (trim.branch_name: `git check-ref-format --branch`); an answer
with nothing usable left is a provider error, never an invented name.
"""

from __future__ import annotations

from byok.proto import features_pb2 as fpb

from ..wire.errors import ProtocolError
from . import trim
from .call import CallContext, OneShot
from .llm import Ask, answer
from .prompts import PROMPTS
from .shared import clip, configured

PATH = "/aiserver.v1.AiService/WriteGitBranchName"
DIFF_CHARS = 12_000
CONTEXT_CHARS = 4_000


def ask(request: fpb.WriteGitBranchNameRequest) -> Ask:
    if not request.diffs.strip() and not request.context.strip():
        raise ProtocolError("WriteGitBranchName with neither a diff nor a context: nothing to name")
    system, user = PROMPTS["branch_name"].render(
        DIFF=clip(request.diffs, DIFF_CHARS), CONTEXT=clip(request.context, CONTEXT_CHARS))
    return Ask("branch_name", system, user, conversation_id=request.conversation_id or None)


async def serve(request: fpb.WriteGitBranchNameRequest, ctx: CallContext) -> fpb.WriteGitBranchNameResponse:
    name = await answer(ask(request), ctx, shape=trim.branch_name, what="branch name")
    return fpb.WriteGitBranchNameResponse(branch_name=name)


SERVICES = (
    OneShot(path=PATH, feature="branch_name", request_type=fpb.WriteGitBranchNameRequest,
            response_type=fpb.WriteGitBranchNameResponse, streaming=False, serve=serve,
            **configured("branch_name")),
)
