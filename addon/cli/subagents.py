"""Cursor's side of the Task tool, for the Cursor-like client: a `subagent_args` exec starts a child
run, as the seed describes Cursor doing it (§32, §33.1, §33.6; PROTOCOL 5.11):

    parent stream: exec subagent_args{tool_call_id, subagent_type, model_id, prompt, readonly,
                   run_in_background, resume_agent_id, parent/root conversation}
    -> a NEW conversation (agent_id = its id; `resume_agent_id` continues an earlier one from its last
       checkpoint): RunSSE + BidiAppend run_request{conversation_id=agent_id, subagent_type_name,
       requested_model=model_id, conversation_group_id=root, user_message{text=prompt}, the parent's
       request context}; every append of that request carries X-Parent-Agent-Tool-Call-Id
    -> foreground: wait for the child's end-stream, reply subagent_result{success{agent_id,
       final_message, tool_call_count}} (or error{agent_id, error});
       background: reply success{agent_id, background_reason=AGENT_REQUEST} at once, run the child, and
       queue a BackgroundTaskCompletion for the parent when it ends (`completions`, and
       `completion_request` builds the parent's next run_request, as Cursor opens one).
    -> an ExecServerAbort of the subagent exec on the parent stream cancels the child run
       (cancel_action on its request); nothing is replied for the aborted exec.

The child's own execs go to a LocalExecutor of its own (exec ids are per request). Use it as the
client's exec handler and run the parent through it:

    runner = SubagentRunner(LocalExecutor(workspace), parent_request)
    async with proxy.client(on_exec=runner.on_exec, on_query=queries.on_query) as client:
        result = await runner.run(client, parent_request)
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from byok.agent.run import PARENT_TOOL_CALL_HEADER
from byok.proto import agent_pb2 as apb

from .client import CursorClient, Frame, RunResult, handler_request_id
from .executor import LocalExecutor

E = apb.ExecClientMessage
ABORTED = "Subagent was aborted by the user"


@dataclass
class Child:
    agent_id: str
    args: apb.SubagentArgs
    request_id: str
    parent_request_id: str
    exec_id: int
    request: apb.AgentRunRequest
    result: RunResult | None = None
    error: str | None = None
    aborted: bool = False
    task: asyncio.Task | None = None

    @property
    def final_message(self) -> str:
        return final_text(self.result) if self.result is not None else ""

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.end_error is None


def final_text(result: RunResult) -> str:
    """The text of the run's last model answer (after its last tool card)."""
    text: list[str] = []
    for f in result.frames:
        if f.direction != "down":
            continue
        if f.kind in ("interaction_update.tool_call_started", "interaction_update.tool_call_completed"):
            text = []
        elif f.kind == "interaction_update.text_delta":
            text.append(f.message.interaction_update.text_delta.text)
    return "".join(text)


@dataclass
class SubagentRunner:
    root: LocalExecutor
    parent_request: apb.AgentRunRequest
    children: list[Child] = field(default_factory=list)
    completions: asyncio.Queue = field(default_factory=asyncio.Queue)
    """BackgroundTaskCompletion of each background child, when it ended."""
    states: dict[str, apb.ConversationStateStructure] = field(default_factory=dict)
    """agent id -> its last checkpoint (a resumed subagent continues from it)."""
    descriptions: dict[str, str] = field(default_factory=dict)
    """Task call id -> its description (the card's title), for the completion's title."""
    on_child_frame: object = None
    """Optional callable(child, frame), e.g. to stop the proxy at a chosen moment of a child run."""

    def __post_init__(self) -> None:
        self.root.subagents = self
        self.executors: dict[str, LocalExecutor] = {}
        self._running: dict[tuple[str, int], Child] = {}
        self._client: CursorClient | None = None

    # ---- plumbing -----------------------------------------------------------------------------------

    async def on_exec(self, client: CursorClient, message: apb.ExecServerMessage) -> None:
        """`CursorClient.on_exec`: each request's execs go to its own executor."""
        executor = self.executors.get(handler_request_id(), self.root)
        await executor.on_exec(client, message)

    async def run(self, client: CursorClient, request: apb.AgentRunRequest, *,
                  request_id: str | None = None) -> RunResult:
        """Run a parent request (its aborts reach the subagents it started)."""
        request_id = request_id or str(uuid.uuid4())
        return await client.run(request, request_id=request_id, on_frame=self._frame_hook(request_id, self.root))

    def _frame_hook(self, request_id: str, executor: LocalExecutor, child: Child | None = None):
        def hook(frame: Frame) -> None:
            executor.on_frame(frame)
            if frame.direction != "down":
                return
            if child is not None and self.on_child_frame is not None:
                self.on_child_frame(child, frame)
            if frame.kind == "interaction_update.tool_call_started":
                started = frame.message.interaction_update.tool_call_started
                if started.tool_call.WhichOneof("tool") == "task_tool_call":
                    self.descriptions[started.call_id] = started.tool_call.task_tool_call.args.description
            elif frame.kind == "exec_server_control_message":
                control = frame.message.exec_server_control_message
                if control.WhichOneof("message") == "abort":
                    target = self._running.get((request_id, control.abort.id))
                    if target is not None:
                        self._abort(target)
        return hook

    # ---- the subagent exec ------------------------------------------------------------------------

    async def execute(self, client: CursorClient, parent_request_id: str, message: apb.ExecServerMessage) -> E | None:
        self._client = client
        args = message.subagent_args
        agent_id = args.resume_agent_id if args.HasField("resume_agent_id") and args.resume_agent_id else str(uuid.uuid4())
        child = Child(agent_id, args, str(uuid.uuid4()), parent_request_id, message.id, self.child_request(agent_id, args))
        self.children.append(child)
        self._running[(parent_request_id, message.id)] = child
        client.append_headers[child.request_id] = {PARENT_TOOL_CALL_HEADER: args.tool_call_id}
        if args.run_in_background:
            child.task = asyncio.get_running_loop().create_task(self._background(client, child))
            return E(id=message.id, subagent_result=apb.SubagentResult(success=apb.SubagentSuccess(
                agent_id=agent_id, background_reason=apb.SUBAGENT_BACKGROUND_REASON_AGENT_REQUEST)))
        await self._run_child(client, child)
        if child.aborted:
            return None  # the server stopped it: no result for that exec
        return E(id=message.id, subagent_result=self.result_of(child))

    def child_request(self, agent_id: str, args: apb.SubagentArgs) -> apb.AgentRunRequest:
        parent = self.parent_request
        request = apb.AgentRunRequest(conversation_id=agent_id, subagent_type_name=args.subagent_type or "generalPurpose",
                                      requested_model=apb.RequestedModel(model_id=args.model_id))
        if args.HasField("root_parent_conversation_id") and args.root_parent_conversation_id:
            request.conversation_group_id = args.root_parent_conversation_id
        state = self.states.get(agent_id)
        if state is not None:
            request.conversation_state.CopyFrom(state)
        else:
            request.conversation_state.SetInParent()
        request.mcp_tools.CopyFrom(parent.mcp_tools)
        action = request.action
        if parent.action.HasField("request_context_parts"):
            action.request_context_parts.CopyFrom(parent.action.request_context_parts)
        um = action.user_message_action.user_message
        um.text, um.message_id, um.mode = args.prompt, str(uuid.uuid4()), apb.AGENT_MODE_AGENT
        if parent.action.WhichOneof("action") == "user_message_action":
            action.user_message_action.request_context.CopyFrom(parent.action.user_message_action.request_context)
        return request

    async def _run_child(self, client: CursorClient, child: Child) -> None:
        executor = LocalExecutor(self.root.workspace, terminals_folder=self.root.terminals_folder,
                                 pages=self.root.pages, mcp=self.root.mcp)
        executor.subagents = self
        self.executors[child.request_id] = executor
        try:
            child.result = await client.run(child.request, request_id=child.request_id,
                                            on_frame=self._frame_hook(child.request_id, executor, child))
            checkpoints = child.result.checkpoints()
            if checkpoints:
                self.states[child.agent_id] = checkpoints[-1]
        except Exception as e:  # the stream broke (e.g. the proxy died): no result to give
            child.error = f"{type(e).__name__}: {e}"
        finally:
            await executor.aclose()
            self._running.pop((child.parent_request_id, child.exec_id), None)

    async def _background(self, client: CursorClient, child: Child) -> None:
        await self._run_child(client, child)
        if child.result is not None:
            await self.completions.put(self.completion_of(child))

    def _abort(self, child: Child) -> None:
        child.aborted = True
        cancel = apb.AgentClientMessage(conversation_action=apb.ConversationAction(
            cancel_action=apb.CancelAction(reason=ABORTED)))
        if self._client is not None:
            self._client.append_soon(child.request_id, cancel)

    def result_of(self, child: Child) -> apb.SubagentResult:
        if child.ok:
            tools = len(child.result.down("interaction_update.tool_call_completed"))
            return apb.SubagentResult(success=apb.SubagentSuccess(
                agent_id=child.agent_id, final_message=child.final_message, tool_call_count=tools))
        if child.result is not None and child.result.end_error is not None:
            error = child.result.end_error.message
            if child.result.end_error.code.value == "canceled":
                error = ABORTED
        else:
            error = child.error or "the subagent's stream ended without a result"
        return apb.SubagentResult(error=apb.SubagentError(agent_id=child.agent_id, error=error))

    # ---- background completion ---------------------------------------------------------------------

    def completion_of(self, child: Child) -> apb.BackgroundTaskCompletion:
        ok = child.ok
        completion = apb.BackgroundTaskCompletion(
            task_id=child.agent_id, kind=apb.BACKGROUND_TASK_KIND_SUBAGENT,
            status=apb.BACKGROUND_TASK_STATUS_SUCCESS if ok else apb.BACKGROUND_TASK_STATUS_ERROR,
            title=self.descriptions.get(child.args.tool_call_id, ""),
            reason=apb.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED,
            subagent_id=child.agent_id, tool_call_id=child.args.tool_call_id)
        detail = child.final_message if ok else self.result_of(child).error.error
        if detail:
            completion.detail = detail
        return completion

    def completion_request(self, state: apb.ConversationStateStructure,
                           completions: list[apb.BackgroundTaskCompletion]) -> apb.AgentRunRequest:
        """The parent's next run_request, as Cursor opens it when background tasks finished."""
        parent = self.parent_request
        request = apb.AgentRunRequest(conversation_id=parent.conversation_id,
                                      requested_model=parent.requested_model)
        request.conversation_state.CopyFrom(state)
        request.action.background_task_completion_action.completions.extend(completions)
        return request

    async def wait_background(self, timeout: float = 30.0) -> None:
        tasks = [c.task for c in self.children if c.task is not None]
        if tasks:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout)
