"""Local tools: the typed success is built here, with no exec or query (PROTOCOL 5.7, seed §26.13).

TodoWrite -> `update_todos_tool_call`. merge=false replaces the list; merge=true updates items by id
(content/status given replace the old ones) and appends new ids. The previous list comes from the
dispatcher as `ctx.extra["todos"]` (list of `TodoItem`, folded from history; absent = none).
Optional `ctx.extra["now_ms"]` stamps created_at/updated_at. The content is the canonical JSON
`{"merge":…,"todos":[{"content","id","status"}…]}` of the resulting list, which
`todos_from_content` reads back (the Todo state fold).

UpdateCurrentStep -> `communicate_update_tool_call` (there is no UpdateCurrentStep message). The
success carries `message_index` from `ctx.extra["message_index"]`: the 1-based position of this
call's ConversationStep in the current turn, computed by the dispatcher (§26.13, Q8).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf.message import Message

from byok.proto import agent_pb2 as apb

from .base import CallIO, RunToolContext, ToolArgsError, ToolDef, ToolOutcome
from .common import Args, dumps

STATUS = {
    "pending": apb.TODO_STATUS_PENDING,
    "in_progress": apb.TODO_STATUS_IN_PROGRESS,
    "completed": apb.TODO_STATUS_COMPLETED,
    "cancelled": apb.TODO_STATUS_CANCELLED,
}
STATUS_NAME = {v: k for k, v in STATUS.items()}


# ---- TodoWrite ----------------------------------------------------------------------------------


def _previous(ctx: RunToolContext) -> list[apb.TodoItem]:
    return list(ctx.extra.get("todos") or ())


def _parse_todos(raw: dict, call_id: str, ctx: RunToolContext) -> apb.UpdateTodosArgs:
    a = Args(raw)
    merge = a.boolean("merge", required=True)
    items = a.objects("todos", required=True)
    known = {t.id for t in _previous(ctx)} if merge else set()
    args = apb.UpdateTodosArgs(merge=merge)
    seen: set[str] = set()
    for item in items:
        todo_id = item.string("id", required=True, non_empty=True)
        if todo_id in seen:
            raise ToolArgsError(f"invalid todos: the id {todo_id!r} appears more than once")
        seen.add(todo_id)
        new = todo_id not in known
        # Merging into an existing item may leave content/status out (unchanged); a new item needs content.
        content = item.string("content", required=new, non_empty=new)
        status = item.choice("status", tuple(STATUS), required=not merge)
        todo = args.todos.add(id=todo_id, content=content or "")
        if status is not None:
            todo.status = STATUS[status]
    return args


def merge_todos(previous: Sequence[apb.TodoItem], args: apb.UpdateTodosArgs, now_ms: int | None) -> list[apb.TodoItem]:
    """The todo list after this call (see the module docstring)."""
    stamp = now_ms or 0
    if not args.merge:
        out = []
        for t in args.todos:
            item = apb.TodoItem(id=t.id, content=t.content, status=t.status or apb.TODO_STATUS_PENDING,
                                created_at=stamp, updated_at=stamp)
            out.append(item)
        return out
    out = [apb.TodoItem.FromString(t.SerializeToString()) for t in previous]  # never mutate the caller's items
    by_id = {t.id: t for t in out}
    for t in args.todos:
        old = by_id.get(t.id)
        if old is None:
            item = apb.TodoItem(id=t.id, content=t.content, status=t.status or apb.TODO_STATUS_PENDING,
                                created_at=stamp, updated_at=stamp)
            out.append(item)
            by_id[t.id] = item
            continue
        if t.content:
            old.content = t.content
        if t.status:
            old.status = t.status
        if now_ms is not None:
            old.updated_at = now_ms
    return out


def todos_json(merge: bool, todos: Sequence[apb.TodoItem]) -> str:
    items = []
    for t in todos:
        item = {"id": t.id, "content": t.content, "status": STATUS_NAME.get(t.status, "pending")}
        if t.dependencies:
            item["dependencies"] = list(t.dependencies)
        items.append(item)
    return dumps({"merge": merge, "todos": items})


def todos_from_content(content: str) -> list[apb.TodoItem]:
    """The todo list a TodoWrite result content holds (strict: ValueError on anything else)."""
    data = json.loads(content)
    if not isinstance(data, dict) or not isinstance(data.get("todos"), list):
        raise ValueError("not a TodoWrite result")
    out = []
    for item in data["todos"]:
        if item.get("status") not in STATUS:
            raise ValueError(f"unknown todo status {item.get('status')!r}")
        out.append(apb.TodoItem(id=item["id"], content=item["content"], status=STATUS[item["status"]],
                                dependencies=item.get("dependencies", [])))
    return out


async def _run_todos(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    ctx = io.context
    todos = merge_todos(_previous(ctx), card, ctx.extra.get("now_ms"))
    success = apb.UpdateTodosSuccess(todos=todos, total_count=len(todos), was_merge=card.merge)
    return ToolOutcome(apb.UpdateTodosResult(success=success), todos_json(card.merge, todos))


TODO_WRITE = ToolDef("TodoWrite", "local", "update_todos_tool_call", _parse_todos, _run_todos,
                     lambda message: apb.UpdateTodosResult(error=apb.UpdateTodosError(error=message)))


# ---- UpdateCurrentStep --------------------------------------------------------------------------

_STEP_FIELDS = ("current_step", "final_summary", "completed_subtitle")


def _parse_step(raw: dict, call_id: str, ctx: RunToolContext) -> apb.CommunicateUpdateArgs:
    a = Args(raw)
    args = apb.CommunicateUpdateArgs()
    for name in _STEP_FIELDS:
        value = a.string(name)
        if value is not None:
            setattr(args, name, value)
    return args


async def _run_step(io: CallIO, raw: dict, card: Message) -> ToolOutcome:
    index = io.context.extra.get("message_index")
    if not isinstance(index, int) or index < 1:
        raise RuntimeError("UpdateCurrentStep needs ctx.extra['message_index'] (1-based step position in the turn)")
    success = apb.CommunicateUpdateSuccess(current_step=card.current_step, message_index=index)
    shown = {name: getattr(card, name) for name in _STEP_FIELDS if card.HasField(name)}
    return ToolOutcome(apb.CommunicateUpdateResult(success=success), dumps({**shown, "message_index": index}))


UPDATE_CURRENT_STEP = ToolDef(
    "UpdateCurrentStep", "local", "communicate_update_tool_call", _parse_step, _run_step,
    lambda message: apb.CommunicateUpdateResult(error=apb.CommunicateUpdateError(error=message)))
