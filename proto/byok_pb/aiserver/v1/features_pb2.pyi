from . import aiserver_pb2 as _aiserver_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LintSeverity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LINT_SEVERITY_UNSPECIFIED: _ClassVar[LintSeverity]
    LINT_SEVERITY_ERROR: _ClassVar[LintSeverity]
    LINT_SEVERITY_WARNING: _ClassVar[LintSeverity]
    LINT_SEVERITY_INFO: _ClassVar[LintSeverity]
    LINT_SEVERITY_HINT: _ClassVar[LintSeverity]
    LINT_SEVERITY_AI: _ClassVar[LintSeverity]
LINT_SEVERITY_UNSPECIFIED: LintSeverity
LINT_SEVERITY_ERROR: LintSeverity
LINT_SEVERITY_WARNING: LintSeverity
LINT_SEVERITY_INFO: LintSeverity
LINT_SEVERITY_HINT: LintSeverity
LINT_SEVERITY_AI: LintSeverity

class CmdKExternalLink(_message.Message):
    __slots__ = ("url", "uuid")
    URL_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    url: str
    uuid: str
    def __init__(self, url: _Optional[str] = ..., uuid: _Optional[str] = ...) -> None: ...

class CmdKLegacyContext(_message.Message):
    __slots__ = ("explicit_context", "documentation_identifiers")
    EXPLICIT_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_IDENTIFIERS_FIELD_NUMBER: _ClassVar[int]
    explicit_context: ExplicitContext
    documentation_identifiers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, explicit_context: _Optional[_Union[ExplicitContext, _Mapping]] = ..., documentation_identifiers: _Optional[_Iterable[str]] = ...) -> None: ...

class CmdKOptions(_message.Message):
    __slots__ = ("chat_mode", "ada_cmd_k_context", "model_details", "use_reranker", "use_web", "request_is_for_caching")
    CHAT_MODE_FIELD_NUMBER: _ClassVar[int]
    ADA_CMD_K_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_DETAILS_FIELD_NUMBER: _ClassVar[int]
    USE_RERANKER_FIELD_NUMBER: _ClassVar[int]
    USE_WEB_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IS_FOR_CACHING_FIELD_NUMBER: _ClassVar[int]
    chat_mode: bool
    ada_cmd_k_context: bool
    model_details: _aiserver_pb2.ModelDetails
    use_reranker: bool
    use_web: bool
    request_is_for_caching: bool
    def __init__(self, chat_mode: _Optional[bool] = ..., ada_cmd_k_context: _Optional[bool] = ..., model_details: _Optional[_Union[_aiserver_pb2.ModelDetails, _Mapping]] = ..., use_reranker: _Optional[bool] = ..., use_web: _Optional[bool] = ..., request_is_for_caching: _Optional[bool] = ...) -> None: ...

class CmdKPreviousEdit(_message.Message):
    __slots__ = ("original_lines", "new_lines", "relative_path", "extra_context_above", "extra_context_below")
    ORIGINAL_LINES_FIELD_NUMBER: _ClassVar[int]
    NEW_LINES_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_PATH_FIELD_NUMBER: _ClassVar[int]
    EXTRA_CONTEXT_ABOVE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_CONTEXT_BELOW_FIELD_NUMBER: _ClassVar[int]
    original_lines: _containers.RepeatedScalarFieldContainer[str]
    new_lines: _containers.RepeatedScalarFieldContainer[str]
    relative_path: str
    extra_context_above: _containers.RepeatedScalarFieldContainer[str]
    extra_context_below: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, original_lines: _Optional[_Iterable[str]] = ..., new_lines: _Optional[_Iterable[str]] = ..., relative_path: _Optional[str] = ..., extra_context_above: _Optional[_Iterable[str]] = ..., extra_context_below: _Optional[_Iterable[str]] = ...) -> None: ...

class CmdKUpcomingEdit(_message.Message):
    __slots__ = ("original_lines", "relative_path", "extra_context_above", "extra_context_below")
    ORIGINAL_LINES_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_PATH_FIELD_NUMBER: _ClassVar[int]
    EXTRA_CONTEXT_ABOVE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_CONTEXT_BELOW_FIELD_NUMBER: _ClassVar[int]
    original_lines: _containers.RepeatedScalarFieldContainer[str]
    relative_path: str
    extra_context_above: _containers.RepeatedScalarFieldContainer[str]
    extra_context_below: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, original_lines: _Optional[_Iterable[str]] = ..., relative_path: _Optional[str] = ..., extra_context_above: _Optional[_Iterable[str]] = ..., extra_context_below: _Optional[_Iterable[str]] = ...) -> None: ...

class ContextItem(_message.Message):
    __slots__ = ("file_chunk", "outline_chunk", "cmd_k_selection", "cmd_k_immediate_context", "cmd_k_query", "cmd_k_query_history", "custom_instructions", "go_to_definition_result", "documentation_chunk", "lints", "chat_history", "notebook_cell_output", "terminal_history", "terminal_cmd_k_query", "terminal_cmd_k_query_history", "sparse_file_chunk", "commit_note_chunk", "cmd_k_query_history_in_diff_session", "project_rule")
    class ChatHistory(_message.Message):
        __slots__ = ("user_message", "assistant_response", "chat_history", "active_for_cmd_k", "timestamp", "timestamp_double")
        USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        ASSISTANT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
        CHAT_HISTORY_FIELD_NUMBER: _ClassVar[int]
        ACTIVE_FOR_CMD_K_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_DOUBLE_FIELD_NUMBER: _ClassVar[int]
        user_message: str
        assistant_response: str
        chat_history: ContextItem.ChatHistory
        active_for_cmd_k: bool
        timestamp: int
        timestamp_double: float
        def __init__(self, user_message: _Optional[str] = ..., assistant_response: _Optional[str] = ..., chat_history: _Optional[_Union[ContextItem.ChatHistory, _Mapping]] = ..., active_for_cmd_k: _Optional[bool] = ..., timestamp: _Optional[int] = ..., timestamp_double: _Optional[float] = ...) -> None: ...
    class CmdKImmediateContext(_message.Message):
        __slots__ = ("relative_workspace_path", "lines", "total_number_of_lines_in_file", "cell_number")
        class Line(_message.Message):
            __slots__ = ("line", "line_number")
            LINE_FIELD_NUMBER: _ClassVar[int]
            LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
            line: str
            line_number: int
            def __init__(self, line: _Optional[str] = ..., line_number: _Optional[int] = ...) -> None: ...
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        LINES_FIELD_NUMBER: _ClassVar[int]
        TOTAL_NUMBER_OF_LINES_IN_FILE_FIELD_NUMBER: _ClassVar[int]
        CELL_NUMBER_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        lines: _containers.RepeatedCompositeFieldContainer[ContextItem.CmdKImmediateContext.Line]
        total_number_of_lines_in_file: int
        cell_number: int
        def __init__(self, relative_workspace_path: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[ContextItem.CmdKImmediateContext.Line, _Mapping]]] = ..., total_number_of_lines_in_file: _Optional[int] = ..., cell_number: _Optional[int] = ...) -> None: ...
    class CmdKQuery(_message.Message):
        __slots__ = ("query",)
        QUERY_FIELD_NUMBER: _ClassVar[int]
        query: str
        def __init__(self, query: _Optional[str] = ...) -> None: ...
    class CmdKQueryHistory(_message.Message):
        __slots__ = ("query", "immediate_context", "selection", "query_history", "context_item_hashes", "timestamp", "timestamp_double")
        QUERY_FIELD_NUMBER: _ClassVar[int]
        IMMEDIATE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
        SELECTION_FIELD_NUMBER: _ClassVar[int]
        QUERY_HISTORY_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_ITEM_HASHES_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_DOUBLE_FIELD_NUMBER: _ClassVar[int]
        query: ContextItem.CmdKQuery
        immediate_context: ContextItem.CmdKImmediateContext
        selection: ContextItem.CmdKSelection
        query_history: ContextItem.CmdKQueryHistory
        context_item_hashes: _containers.RepeatedScalarFieldContainer[str]
        timestamp: int
        timestamp_double: float
        def __init__(self, query: _Optional[_Union[ContextItem.CmdKQuery, _Mapping]] = ..., immediate_context: _Optional[_Union[ContextItem.CmdKImmediateContext, _Mapping]] = ..., selection: _Optional[_Union[ContextItem.CmdKSelection, _Mapping]] = ..., query_history: _Optional[_Union[ContextItem.CmdKQueryHistory, _Mapping]] = ..., context_item_hashes: _Optional[_Iterable[str]] = ..., timestamp: _Optional[int] = ..., timestamp_double: _Optional[float] = ...) -> None: ...
    class CmdKQueryHistoryInDiffSession(_message.Message):
        __slots__ = ("past_cmdk_queries", "curr_timestamp_double")
        class PastCmdKQueryInDiffSession(_message.Message):
            __slots__ = ("query", "relative_workspace_path", "cmdk_was_accepted", "timestamp_double", "timestamp_for_diff_interleaving", "request_id")
            QUERY_FIELD_NUMBER: _ClassVar[int]
            RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
            CMDK_WAS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
            TIMESTAMP_DOUBLE_FIELD_NUMBER: _ClassVar[int]
            TIMESTAMP_FOR_DIFF_INTERLEAVING_FIELD_NUMBER: _ClassVar[int]
            REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
            query: ContextItem.CmdKQuery
            relative_workspace_path: str
            cmdk_was_accepted: bool
            timestamp_double: float
            timestamp_for_diff_interleaving: float
            request_id: str
            def __init__(self, query: _Optional[_Union[ContextItem.CmdKQuery, _Mapping]] = ..., relative_workspace_path: _Optional[str] = ..., cmdk_was_accepted: _Optional[bool] = ..., timestamp_double: _Optional[float] = ..., timestamp_for_diff_interleaving: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...
        PAST_CMDK_QUERIES_FIELD_NUMBER: _ClassVar[int]
        CURR_TIMESTAMP_DOUBLE_FIELD_NUMBER: _ClassVar[int]
        past_cmdk_queries: _containers.RepeatedCompositeFieldContainer[ContextItem.CmdKQueryHistoryInDiffSession.PastCmdKQueryInDiffSession]
        curr_timestamp_double: float
        def __init__(self, past_cmdk_queries: _Optional[_Iterable[_Union[ContextItem.CmdKQueryHistoryInDiffSession.PastCmdKQueryInDiffSession, _Mapping]]] = ..., curr_timestamp_double: _Optional[float] = ...) -> None: ...
    class CmdKSelection(_message.Message):
        __slots__ = ("lines", "start_line_number")
        LINES_FIELD_NUMBER: _ClassVar[int]
        START_LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
        lines: _containers.RepeatedScalarFieldContainer[str]
        start_line_number: int
        def __init__(self, lines: _Optional[_Iterable[str]] = ..., start_line_number: _Optional[int] = ...) -> None: ...
    class CommitNoteChunk(_message.Message):
        __slots__ = ("note",)
        NOTE_FIELD_NUMBER: _ClassVar[int]
        note: str
        def __init__(self, note: _Optional[str] = ...) -> None: ...
    class CustomInstructions(_message.Message):
        __slots__ = ("instructions",)
        INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
        instructions: str
        def __init__(self, instructions: _Optional[str] = ...) -> None: ...
    class DocumentationChunk(_message.Message):
        __slots__ = ("doc_name", "page_url", "documentation_chunk", "score")
        DOC_NAME_FIELD_NUMBER: _ClassVar[int]
        PAGE_URL_FIELD_NUMBER: _ClassVar[int]
        DOCUMENTATION_CHUNK_FIELD_NUMBER: _ClassVar[int]
        SCORE_FIELD_NUMBER: _ClassVar[int]
        doc_name: str
        page_url: str
        documentation_chunk: str
        score: float
        def __init__(self, doc_name: _Optional[str] = ..., page_url: _Optional[str] = ..., documentation_chunk: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...
    class FileChunk(_message.Message):
        __slots__ = ("relative_workspace_path", "chunk_contents", "start_line_number")
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        CHUNK_CONTENTS_FIELD_NUMBER: _ClassVar[int]
        START_LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        chunk_contents: str
        start_line_number: int
        def __init__(self, relative_workspace_path: _Optional[str] = ..., chunk_contents: _Optional[str] = ..., start_line_number: _Optional[int] = ...) -> None: ...
    class GoToDefinitionResult(_message.Message):
        __slots__ = ("relative_workspace_path", "line", "line_number", "column_number", "definition_chunk")
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        LINE_FIELD_NUMBER: _ClassVar[int]
        LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
        COLUMN_NUMBER_FIELD_NUMBER: _ClassVar[int]
        DEFINITION_CHUNK_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        line: str
        line_number: int
        column_number: int
        definition_chunk: ContextItem.FileChunk
        def __init__(self, relative_workspace_path: _Optional[str] = ..., line: _Optional[str] = ..., line_number: _Optional[int] = ..., column_number: _Optional[int] = ..., definition_chunk: _Optional[_Union[ContextItem.FileChunk, _Mapping]] = ...) -> None: ...
    class Lints(_message.Message):
        __slots__ = ("relative_workspace_path", "lints", "context_lines")
        class Line(_message.Message):
            __slots__ = ("line", "line_number")
            LINE_FIELD_NUMBER: _ClassVar[int]
            LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
            line: str
            line_number: int
            def __init__(self, line: _Optional[str] = ..., line_number: _Optional[int] = ...) -> None: ...
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        LINTS_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_LINES_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        lints: _containers.RepeatedCompositeFieldContainer[Lint]
        context_lines: _containers.RepeatedCompositeFieldContainer[ContextItem.Lints.Line]
        def __init__(self, relative_workspace_path: _Optional[str] = ..., lints: _Optional[_Iterable[_Union[Lint, _Mapping]]] = ..., context_lines: _Optional[_Iterable[_Union[ContextItem.Lints.Line, _Mapping]]] = ...) -> None: ...
    class NotebookCellOutput(_message.Message):
        __slots__ = ("relative_workspace_path", "cell_output", "cell_number")
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        CELL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
        CELL_NUMBER_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        cell_output: str
        cell_number: int
        def __init__(self, relative_workspace_path: _Optional[str] = ..., cell_output: _Optional[str] = ..., cell_number: _Optional[int] = ...) -> None: ...
    class OutlineChunk(_message.Message):
        __slots__ = ("relative_workspace_path", "contents")
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        CONTENTS_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        contents: str
        def __init__(self, relative_workspace_path: _Optional[str] = ..., contents: _Optional[str] = ...) -> None: ...
    class SparseFileChunk(_message.Message):
        __slots__ = ("relative_workspace_path", "lines", "total_number_of_lines_in_file", "cell_number")
        class Line(_message.Message):
            __slots__ = ("line", "line_number")
            LINE_FIELD_NUMBER: _ClassVar[int]
            LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
            line: str
            line_number: int
            def __init__(self, line: _Optional[str] = ..., line_number: _Optional[int] = ...) -> None: ...
        RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        LINES_FIELD_NUMBER: _ClassVar[int]
        TOTAL_NUMBER_OF_LINES_IN_FILE_FIELD_NUMBER: _ClassVar[int]
        CELL_NUMBER_FIELD_NUMBER: _ClassVar[int]
        relative_workspace_path: str
        lines: _containers.RepeatedCompositeFieldContainer[ContextItem.SparseFileChunk.Line]
        total_number_of_lines_in_file: int
        cell_number: int
        def __init__(self, relative_workspace_path: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[ContextItem.SparseFileChunk.Line, _Mapping]]] = ..., total_number_of_lines_in_file: _Optional[int] = ..., cell_number: _Optional[int] = ...) -> None: ...
    class TerminalCmdKQuery(_message.Message):
        __slots__ = ("query",)
        QUERY_FIELD_NUMBER: _ClassVar[int]
        query: str
        def __init__(self, query: _Optional[str] = ...) -> None: ...
    class TerminalCmdKQueryHistory(_message.Message):
        __slots__ = ("query", "query_history", "context_item_hashes", "suggested_command")
        QUERY_FIELD_NUMBER: _ClassVar[int]
        QUERY_HISTORY_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_ITEM_HASHES_FIELD_NUMBER: _ClassVar[int]
        SUGGESTED_COMMAND_FIELD_NUMBER: _ClassVar[int]
        query: ContextItem.TerminalCmdKQuery
        query_history: ContextItem.TerminalCmdKQueryHistory
        context_item_hashes: _containers.RepeatedScalarFieldContainer[str]
        suggested_command: str
        def __init__(self, query: _Optional[_Union[ContextItem.TerminalCmdKQuery, _Mapping]] = ..., query_history: _Optional[_Union[ContextItem.TerminalCmdKQueryHistory, _Mapping]] = ..., context_item_hashes: _Optional[_Iterable[str]] = ..., suggested_command: _Optional[str] = ...) -> None: ...
    class TerminalHistory(_message.Message):
        __slots__ = ("history", "active_for_cmd_k", "cwd_full", "cwd_relative_workspace_path", "timestamp", "timestamp_double")
        HISTORY_FIELD_NUMBER: _ClassVar[int]
        ACTIVE_FOR_CMD_K_FIELD_NUMBER: _ClassVar[int]
        CWD_FULL_FIELD_NUMBER: _ClassVar[int]
        CWD_RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_DOUBLE_FIELD_NUMBER: _ClassVar[int]
        history: str
        active_for_cmd_k: bool
        cwd_full: str
        cwd_relative_workspace_path: str
        timestamp: int
        timestamp_double: float
        def __init__(self, history: _Optional[str] = ..., active_for_cmd_k: _Optional[bool] = ..., cwd_full: _Optional[str] = ..., cwd_relative_workspace_path: _Optional[str] = ..., timestamp: _Optional[int] = ..., timestamp_double: _Optional[float] = ...) -> None: ...
    FILE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    OUTLINE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    CMD_K_SELECTION_FIELD_NUMBER: _ClassVar[int]
    CMD_K_IMMEDIATE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CMD_K_QUERY_FIELD_NUMBER: _ClassVar[int]
    CMD_K_QUERY_HISTORY_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    GO_TO_DEFINITION_RESULT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_CHUNK_FIELD_NUMBER: _ClassVar[int]
    LINTS_FIELD_NUMBER: _ClassVar[int]
    CHAT_HISTORY_FIELD_NUMBER: _ClassVar[int]
    NOTEBOOK_CELL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_HISTORY_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_CMD_K_QUERY_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_CMD_K_QUERY_HISTORY_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FILE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    COMMIT_NOTE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    CMD_K_QUERY_HISTORY_IN_DIFF_SESSION_FIELD_NUMBER: _ClassVar[int]
    PROJECT_RULE_FIELD_NUMBER: _ClassVar[int]
    file_chunk: ContextItem.FileChunk
    outline_chunk: ContextItem.OutlineChunk
    cmd_k_selection: ContextItem.CmdKSelection
    cmd_k_immediate_context: ContextItem.CmdKImmediateContext
    cmd_k_query: ContextItem.CmdKQuery
    cmd_k_query_history: ContextItem.CmdKQueryHistory
    custom_instructions: ContextItem.CustomInstructions
    go_to_definition_result: ContextItem.GoToDefinitionResult
    documentation_chunk: ContextItem.DocumentationChunk
    lints: ContextItem.Lints
    chat_history: ContextItem.ChatHistory
    notebook_cell_output: ContextItem.NotebookCellOutput
    terminal_history: ContextItem.TerminalHistory
    terminal_cmd_k_query: ContextItem.TerminalCmdKQuery
    terminal_cmd_k_query_history: ContextItem.TerminalCmdKQueryHistory
    sparse_file_chunk: ContextItem.SparseFileChunk
    commit_note_chunk: ContextItem.CommitNoteChunk
    cmd_k_query_history_in_diff_session: ContextItem.CmdKQueryHistoryInDiffSession
    project_rule: CursorRule
    def __init__(self, file_chunk: _Optional[_Union[ContextItem.FileChunk, _Mapping]] = ..., outline_chunk: _Optional[_Union[ContextItem.OutlineChunk, _Mapping]] = ..., cmd_k_selection: _Optional[_Union[ContextItem.CmdKSelection, _Mapping]] = ..., cmd_k_immediate_context: _Optional[_Union[ContextItem.CmdKImmediateContext, _Mapping]] = ..., cmd_k_query: _Optional[_Union[ContextItem.CmdKQuery, _Mapping]] = ..., cmd_k_query_history: _Optional[_Union[ContextItem.CmdKQueryHistory, _Mapping]] = ..., custom_instructions: _Optional[_Union[ContextItem.CustomInstructions, _Mapping]] = ..., go_to_definition_result: _Optional[_Union[ContextItem.GoToDefinitionResult, _Mapping]] = ..., documentation_chunk: _Optional[_Union[ContextItem.DocumentationChunk, _Mapping]] = ..., lints: _Optional[_Union[ContextItem.Lints, _Mapping]] = ..., chat_history: _Optional[_Union[ContextItem.ChatHistory, _Mapping]] = ..., notebook_cell_output: _Optional[_Union[ContextItem.NotebookCellOutput, _Mapping]] = ..., terminal_history: _Optional[_Union[ContextItem.TerminalHistory, _Mapping]] = ..., terminal_cmd_k_query: _Optional[_Union[ContextItem.TerminalCmdKQuery, _Mapping]] = ..., terminal_cmd_k_query_history: _Optional[_Union[ContextItem.TerminalCmdKQueryHistory, _Mapping]] = ..., sparse_file_chunk: _Optional[_Union[ContextItem.SparseFileChunk, _Mapping]] = ..., commit_note_chunk: _Optional[_Union[ContextItem.CommitNoteChunk, _Mapping]] = ..., cmd_k_query_history_in_diff_session: _Optional[_Union[ContextItem.CmdKQueryHistoryInDiffSession, _Mapping]] = ..., project_rule: _Optional[_Union[CursorRule, _Mapping]] = ...) -> None: ...

class ContextItemStatus(_message.Message):
    __slots__ = ("context_item_hash", "shown_to_the_model", "score", "percentage_of_available_space", "post_generation_evaluation")
    class PostGenerationEvaluation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        POST_GENERATION_EVALUATION_UNSPECIFIED: _ClassVar[ContextItemStatus.PostGenerationEvaluation]
        POST_GENERATION_EVALUATION_USEFUL: _ClassVar[ContextItemStatus.PostGenerationEvaluation]
        POST_GENERATION_EVALUATION_USELESS: _ClassVar[ContextItemStatus.PostGenerationEvaluation]
    POST_GENERATION_EVALUATION_UNSPECIFIED: ContextItemStatus.PostGenerationEvaluation
    POST_GENERATION_EVALUATION_USEFUL: ContextItemStatus.PostGenerationEvaluation
    POST_GENERATION_EVALUATION_USELESS: ContextItemStatus.PostGenerationEvaluation
    CONTEXT_ITEM_HASH_FIELD_NUMBER: _ClassVar[int]
    SHOWN_TO_THE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_OF_AVAILABLE_SPACE_FIELD_NUMBER: _ClassVar[int]
    POST_GENERATION_EVALUATION_FIELD_NUMBER: _ClassVar[int]
    context_item_hash: str
    shown_to_the_model: bool
    score: float
    percentage_of_available_space: float
    post_generation_evaluation: ContextItemStatus.PostGenerationEvaluation
    def __init__(self, context_item_hash: _Optional[str] = ..., shown_to_the_model: _Optional[bool] = ..., score: _Optional[float] = ..., percentage_of_available_space: _Optional[float] = ..., post_generation_evaluation: _Optional[_Union[ContextItemStatus.PostGenerationEvaluation, str]] = ...) -> None: ...

class ContextStatusUpdate(_message.Message):
    __slots__ = ("context_item_statuses",)
    CONTEXT_ITEM_STATUSES_FIELD_NUMBER: _ClassVar[int]
    context_item_statuses: _containers.RepeatedCompositeFieldContainer[ContextItemStatus]
    def __init__(self, context_item_statuses: _Optional[_Iterable[_Union[ContextItemStatus, _Mapping]]] = ...) -> None: ...

class ConversationMessage(_message.Message):
    __slots__ = ("text", "type")
    class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MESSAGE_TYPE_UNSPECIFIED: _ClassVar[ConversationMessage.MessageType]
        MESSAGE_TYPE_HUMAN: _ClassVar[ConversationMessage.MessageType]
        MESSAGE_TYPE_AI: _ClassVar[ConversationMessage.MessageType]
    MESSAGE_TYPE_UNSPECIFIED: ConversationMessage.MessageType
    MESSAGE_TYPE_HUMAN: ConversationMessage.MessageType
    MESSAGE_TYPE_AI: ConversationMessage.MessageType
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    text: str
    type: ConversationMessage.MessageType
    def __init__(self, text: _Optional[str] = ..., type: _Optional[_Union[ConversationMessage.MessageType, str]] = ...) -> None: ...

class CurrentFolderFileOrFolder(_message.Message):
    __slots__ = ("name", "is_folder")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_FOLDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    is_folder: bool
    def __init__(self, name: _Optional[str] = ..., is_folder: _Optional[bool] = ...) -> None: ...

class CursorRule(_message.Message):
    __slots__ = ("name", "description", "body", "is_from_glob", "always_apply", "attach_to_background_agents", "full_path", "environments", "disabled_environments", "plugin", "marketplace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    IS_FROM_GLOB_FIELD_NUMBER: _ClassVar[int]
    ALWAYS_APPLY_FIELD_NUMBER: _ClassVar[int]
    ATTACH_TO_BACKGROUND_AGENTS_FIELD_NUMBER: _ClassVar[int]
    FULL_PATH_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    DISABLED_ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    MARKETPLACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    body: str
    is_from_glob: bool
    always_apply: bool
    attach_to_background_agents: bool
    full_path: str
    environments: _containers.RepeatedScalarFieldContainer[str]
    disabled_environments: _containers.RepeatedScalarFieldContainer[str]
    plugin: str
    marketplace: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., body: _Optional[str] = ..., is_from_glob: _Optional[bool] = ..., always_apply: _Optional[bool] = ..., attach_to_background_agents: _Optional[bool] = ..., full_path: _Optional[str] = ..., environments: _Optional[_Iterable[str]] = ..., disabled_environments: _Optional[_Iterable[str]] = ..., plugin: _Optional[str] = ..., marketplace: _Optional[str] = ...) -> None: ...

class ExplicitContext(_message.Message):
    __slots__ = ("context", "repo_context", "rules", "mode_specific_context", "mcp_instructions")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REPO_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    MODE_SPECIFIC_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MCP_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    context: str
    repo_context: str
    rules: _containers.RepeatedCompositeFieldContainer[CursorRule]
    mode_specific_context: str
    mcp_instructions: _containers.RepeatedCompositeFieldContainer[MCPInstructions]
    def __init__(self, context: _Optional[str] = ..., repo_context: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[CursorRule, _Mapping]]] = ..., mode_specific_context: _Optional[str] = ..., mcp_instructions: _Optional[_Iterable[_Union[MCPInstructions, _Mapping]]] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ("relative_workspace_path", "contents")
    RELATIVE_WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    relative_workspace_path: str
    contents: str
    def __init__(self, relative_workspace_path: _Optional[str] = ..., contents: _Optional[str] = ...) -> None: ...

class GetChatTitleRequest(_message.Message):
    __slots__ = ("conversation",)
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    conversation: _containers.RepeatedCompositeFieldContainer[ConversationMessage]
    def __init__(self, conversation: _Optional[_Iterable[_Union[ConversationMessage, _Mapping]]] = ...) -> None: ...

class GetChatTitleResponse(_message.Message):
    __slots__ = ("title",)
    TITLE_FIELD_NUMBER: _ClassVar[int]
    title: str
    def __init__(self, title: _Optional[str] = ...) -> None: ...

class GetTerminalCompletionRequest(_message.Message):
    __slots__ = ("current_command", "command_history", "model_name", "git_diff", "commit_history", "past_results", "model_details", "user_platform", "current_folder", "current_folder_structure", "relevant_files")
    CURRENT_COMMAND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_HISTORY_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    GIT_DIFF_FIELD_NUMBER: _ClassVar[int]
    COMMIT_HISTORY_FIELD_NUMBER: _ClassVar[int]
    PAST_RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_DETAILS_FIELD_NUMBER: _ClassVar[int]
    USER_PLATFORM_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FOLDER_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FOLDER_STRUCTURE_FIELD_NUMBER: _ClassVar[int]
    RELEVANT_FILES_FIELD_NUMBER: _ClassVar[int]
    current_command: str
    command_history: _containers.RepeatedScalarFieldContainer[str]
    model_name: str
    git_diff: str
    commit_history: _containers.RepeatedScalarFieldContainer[str]
    past_results: _containers.RepeatedScalarFieldContainer[str]
    model_details: _aiserver_pb2.ModelDetails
    user_platform: str
    current_folder: str
    current_folder_structure: _containers.RepeatedCompositeFieldContainer[CurrentFolderFileOrFolder]
    relevant_files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, current_command: _Optional[str] = ..., command_history: _Optional[_Iterable[str]] = ..., model_name: _Optional[str] = ..., git_diff: _Optional[str] = ..., commit_history: _Optional[_Iterable[str]] = ..., past_results: _Optional[_Iterable[str]] = ..., model_details: _Optional[_Union[_aiserver_pb2.ModelDetails, _Mapping]] = ..., user_platform: _Optional[str] = ..., current_folder: _Optional[str] = ..., current_folder_structure: _Optional[_Iterable[_Union[CurrentFolderFileOrFolder, _Mapping]]] = ..., relevant_files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class GetTerminalCompletionResponse(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: str
    def __init__(self, command: _Optional[str] = ...) -> None: ...

class IsConnectedRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsConnectedResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Lint(_message.Message):
    __slots__ = ("message", "severity")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    message: str
    severity: LintSeverity
    def __init__(self, message: _Optional[str] = ..., severity: _Optional[_Union[LintSeverity, str]] = ...) -> None: ...

class MCPInstructions(_message.Message):
    __slots__ = ("server_name", "server_identifier", "instructions")
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    server_name: str
    server_identifier: str
    instructions: str
    def __init__(self, server_name: _Optional[str] = ..., server_identifier: _Optional[str] = ..., instructions: _Optional[str] = ...) -> None: ...

class MissingContextItems(_message.Message):
    __slots__ = ("missing_context_item_hashes",)
    MISSING_CONTEXT_ITEM_HASHES_FIELD_NUMBER: _ClassVar[int]
    missing_context_item_hashes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, missing_context_item_hashes: _Optional[_Iterable[str]] = ...) -> None: ...

class NameAgentRequest(_message.Message):
    __slots__ = ("user_message",)
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    user_message: str
    def __init__(self, user_message: _Optional[str] = ...) -> None: ...

class NameAgentResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NameTabRequest(_message.Message):
    __slots__ = ("messages", "is_project")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IS_PROJECT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConversationMessage]
    is_project: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[ConversationMessage, _Mapping]]] = ..., is_project: _Optional[bool] = ...) -> None: ...

class NameTabResponse(_message.Message):
    __slots__ = ("name", "reason", "icon")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ICON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    icon: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ..., icon: _Optional[str] = ...) -> None: ...

class PotentiallyCachedContextItem(_message.Message):
    __slots__ = ("context_item", "context_item_hash")
    CONTEXT_ITEM_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ITEM_HASH_FIELD_NUMBER: _ClassVar[int]
    context_item: ContextItem
    context_item_hash: str
    def __init__(self, context_item: _Optional[_Union[ContextItem, _Mapping]] = ..., context_item_hash: _Optional[str] = ...) -> None: ...

class StreamCmdKRequest(_message.Message):
    __slots__ = ("context_items", "cmd_k_options", "legacy_context", "session_id", "previous_edit", "previous_edits", "use_big_cmdk_for_multi_file_edit", "links", "upcoming_edits", "timing_info", "rules")
    CONTEXT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    CMD_K_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    LEGACY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EDIT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EDITS_FIELD_NUMBER: _ClassVar[int]
    USE_BIG_CMDK_FOR_MULTI_FILE_EDIT_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_EDITS_FIELD_NUMBER: _ClassVar[int]
    TIMING_INFO_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    context_items: _containers.RepeatedCompositeFieldContainer[PotentiallyCachedContextItem]
    cmd_k_options: CmdKOptions
    legacy_context: CmdKLegacyContext
    session_id: str
    previous_edit: CmdKPreviousEdit
    previous_edits: _containers.RepeatedCompositeFieldContainer[CmdKPreviousEdit]
    use_big_cmdk_for_multi_file_edit: bool
    links: _containers.RepeatedCompositeFieldContainer[CmdKExternalLink]
    upcoming_edits: _containers.RepeatedCompositeFieldContainer[CmdKUpcomingEdit]
    timing_info: TimingInfo
    rules: _containers.RepeatedCompositeFieldContainer[CursorRule]
    def __init__(self, context_items: _Optional[_Iterable[_Union[PotentiallyCachedContextItem, _Mapping]]] = ..., cmd_k_options: _Optional[_Union[CmdKOptions, _Mapping]] = ..., legacy_context: _Optional[_Union[CmdKLegacyContext, _Mapping]] = ..., session_id: _Optional[str] = ..., previous_edit: _Optional[_Union[CmdKPreviousEdit, _Mapping]] = ..., previous_edits: _Optional[_Iterable[_Union[CmdKPreviousEdit, _Mapping]]] = ..., use_big_cmdk_for_multi_file_edit: _Optional[bool] = ..., links: _Optional[_Iterable[_Union[CmdKExternalLink, _Mapping]]] = ..., upcoming_edits: _Optional[_Iterable[_Union[CmdKUpcomingEdit, _Mapping]]] = ..., timing_info: _Optional[_Union[TimingInfo, _Mapping]] = ..., rules: _Optional[_Iterable[_Union[CursorRule, _Mapping]]] = ...) -> None: ...

class StreamCmdKResponse(_message.Message):
    __slots__ = ("edit_start", "edit_stream", "edit_end", "chat", "status_update")
    class Chat(_message.Message):
        __slots__ = ("text",)
        TEXT_FIELD_NUMBER: _ClassVar[int]
        text: str
        def __init__(self, text: _Optional[str] = ...) -> None: ...
    class EditEnd(_message.Message):
        __slots__ = ("end_line_number_exclusive", "edit_id", "file_path")
        END_LINE_NUMBER_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
        EDIT_ID_FIELD_NUMBER: _ClassVar[int]
        FILE_PATH_FIELD_NUMBER: _ClassVar[int]
        end_line_number_exclusive: int
        edit_id: int
        file_path: str
        def __init__(self, end_line_number_exclusive: _Optional[int] = ..., edit_id: _Optional[int] = ..., file_path: _Optional[str] = ...) -> None: ...
    class EditStart(_message.Message):
        __slots__ = ("start_line_number", "edit_id", "max_end_line_number_exclusive", "file_path")
        START_LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
        EDIT_ID_FIELD_NUMBER: _ClassVar[int]
        MAX_END_LINE_NUMBER_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
        FILE_PATH_FIELD_NUMBER: _ClassVar[int]
        start_line_number: int
        edit_id: int
        max_end_line_number_exclusive: int
        file_path: str
        def __init__(self, start_line_number: _Optional[int] = ..., edit_id: _Optional[int] = ..., max_end_line_number_exclusive: _Optional[int] = ..., file_path: _Optional[str] = ...) -> None: ...
    class EditStream(_message.Message):
        __slots__ = ("text", "edit_id", "file_path")
        TEXT_FIELD_NUMBER: _ClassVar[int]
        EDIT_ID_FIELD_NUMBER: _ClassVar[int]
        FILE_PATH_FIELD_NUMBER: _ClassVar[int]
        text: str
        edit_id: int
        file_path: str
        def __init__(self, text: _Optional[str] = ..., edit_id: _Optional[int] = ..., file_path: _Optional[str] = ...) -> None: ...
    class StatusUpdate(_message.Message):
        __slots__ = ("messages",)
        MESSAGES_FIELD_NUMBER: _ClassVar[int]
        messages: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, messages: _Optional[_Iterable[str]] = ...) -> None: ...
    EDIT_START_FIELD_NUMBER: _ClassVar[int]
    EDIT_STREAM_FIELD_NUMBER: _ClassVar[int]
    EDIT_END_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    edit_start: StreamCmdKResponse.EditStart
    edit_stream: StreamCmdKResponse.EditStream
    edit_end: StreamCmdKResponse.EditEnd
    chat: StreamCmdKResponse.Chat
    status_update: StreamCmdKResponse.StatusUpdate
    def __init__(self, edit_start: _Optional[_Union[StreamCmdKResponse.EditStart, _Mapping]] = ..., edit_stream: _Optional[_Union[StreamCmdKResponse.EditStream, _Mapping]] = ..., edit_end: _Optional[_Union[StreamCmdKResponse.EditEnd, _Mapping]] = ..., chat: _Optional[_Union[StreamCmdKResponse.Chat, _Mapping]] = ..., status_update: _Optional[_Union[StreamCmdKResponse.StatusUpdate, _Mapping]] = ...) -> None: ...

class StreamCmdKResponseContextWrapped(_message.Message):
    __slots__ = ("real_response", "context_status_update", "missing_context_items")
    REAL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    MISSING_CONTEXT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    real_response: StreamCmdKResponse
    context_status_update: ContextStatusUpdate
    missing_context_items: MissingContextItems
    def __init__(self, real_response: _Optional[_Union[StreamCmdKResponse, _Mapping]] = ..., context_status_update: _Optional[_Union[ContextStatusUpdate, _Mapping]] = ..., missing_context_items: _Optional[_Union[MissingContextItems, _Mapping]] = ...) -> None: ...

class StreamTerminalAutocompleteRequest(_message.Message):
    __slots__ = ("current_command", "command_history", "model_name", "git_diff", "commit_history", "past_results")
    CURRENT_COMMAND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_HISTORY_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    GIT_DIFF_FIELD_NUMBER: _ClassVar[int]
    COMMIT_HISTORY_FIELD_NUMBER: _ClassVar[int]
    PAST_RESULTS_FIELD_NUMBER: _ClassVar[int]
    current_command: str
    command_history: _containers.RepeatedScalarFieldContainer[str]
    model_name: str
    git_diff: str
    commit_history: _containers.RepeatedScalarFieldContainer[str]
    past_results: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, current_command: _Optional[str] = ..., command_history: _Optional[_Iterable[str]] = ..., model_name: _Optional[str] = ..., git_diff: _Optional[str] = ..., commit_history: _Optional[_Iterable[str]] = ..., past_results: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamTerminalAutocompleteResponse(_message.Message):
    __slots__ = ("text", "done_stream")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DONE_STREAM_FIELD_NUMBER: _ClassVar[int]
    text: str
    done_stream: bool
    def __init__(self, text: _Optional[str] = ..., done_stream: _Optional[bool] = ...) -> None: ...

class StreamTerminalCmdKRequest(_message.Message):
    __slots__ = ("context_items", "cmd_k_options", "legacy_context", "session_id")
    CONTEXT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    CMD_K_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    LEGACY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    context_items: _containers.RepeatedCompositeFieldContainer[PotentiallyCachedContextItem]
    cmd_k_options: TerminalCmdKOptions
    legacy_context: CmdKLegacyContext
    session_id: str
    def __init__(self, context_items: _Optional[_Iterable[_Union[PotentiallyCachedContextItem, _Mapping]]] = ..., cmd_k_options: _Optional[_Union[TerminalCmdKOptions, _Mapping]] = ..., legacy_context: _Optional[_Union[CmdKLegacyContext, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class StreamTerminalCmdKResponse(_message.Message):
    __slots__ = ("terminal_command", "chat", "status_update")
    class Chat(_message.Message):
        __slots__ = ("text",)
        TEXT_FIELD_NUMBER: _ClassVar[int]
        text: str
        def __init__(self, text: _Optional[str] = ...) -> None: ...
    class StatusUpdate(_message.Message):
        __slots__ = ("messages",)
        MESSAGES_FIELD_NUMBER: _ClassVar[int]
        messages: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, messages: _Optional[_Iterable[str]] = ...) -> None: ...
    class TerminalCommand(_message.Message):
        __slots__ = ("partial_command",)
        PARTIAL_COMMAND_FIELD_NUMBER: _ClassVar[int]
        partial_command: str
        def __init__(self, partial_command: _Optional[str] = ...) -> None: ...
    TERMINAL_COMMAND_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    terminal_command: StreamTerminalCmdKResponse.TerminalCommand
    chat: StreamTerminalCmdKResponse.Chat
    status_update: StreamTerminalCmdKResponse.StatusUpdate
    def __init__(self, terminal_command: _Optional[_Union[StreamTerminalCmdKResponse.TerminalCommand, _Mapping]] = ..., chat: _Optional[_Union[StreamTerminalCmdKResponse.Chat, _Mapping]] = ..., status_update: _Optional[_Union[StreamTerminalCmdKResponse.StatusUpdate, _Mapping]] = ...) -> None: ...

class StreamTerminalCmdKResponseContextWrapped(_message.Message):
    __slots__ = ("real_response", "context_status_update", "missing_context_items")
    REAL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    MISSING_CONTEXT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    real_response: StreamTerminalCmdKResponse
    context_status_update: ContextStatusUpdate
    missing_context_items: MissingContextItems
    def __init__(self, real_response: _Optional[_Union[StreamTerminalCmdKResponse, _Mapping]] = ..., context_status_update: _Optional[_Union[ContextStatusUpdate, _Mapping]] = ..., missing_context_items: _Optional[_Union[MissingContextItems, _Mapping]] = ...) -> None: ...

class TerminalCmdKOptions(_message.Message):
    __slots__ = ("chat_mode", "ada_cmd_k_context", "model_details", "use_web")
    CHAT_MODE_FIELD_NUMBER: _ClassVar[int]
    ADA_CMD_K_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_DETAILS_FIELD_NUMBER: _ClassVar[int]
    USE_WEB_FIELD_NUMBER: _ClassVar[int]
    chat_mode: bool
    ada_cmd_k_context: bool
    model_details: _aiserver_pb2.ModelDetails
    use_web: bool
    def __init__(self, chat_mode: _Optional[bool] = ..., ada_cmd_k_context: _Optional[bool] = ..., model_details: _Optional[_Union[_aiserver_pb2.ModelDetails, _Mapping]] = ..., use_web: _Optional[bool] = ...) -> None: ...

class TimingInfo(_message.Message):
    __slots__ = ("user_input_time", "stream_cmdk_time")
    USER_INPUT_TIME_FIELD_NUMBER: _ClassVar[int]
    STREAM_CMDK_TIME_FIELD_NUMBER: _ClassVar[int]
    user_input_time: float
    stream_cmdk_time: float
    def __init__(self, user_input_time: _Optional[float] = ..., stream_cmdk_time: _Optional[float] = ...) -> None: ...

class WriteGitBranchNameRequest(_message.Message):
    __slots__ = ("diffs", "context", "conversation_id")
    DIFFS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    diffs: str
    context: str
    conversation_id: str
    def __init__(self, diffs: _Optional[str] = ..., context: _Optional[str] = ..., conversation_id: _Optional[str] = ...) -> None: ...

class WriteGitBranchNameResponse(_message.Message):
    __slots__ = ("branch_name",)
    BRANCH_NAME_FIELD_NUMBER: _ClassVar[int]
    branch_name: str
    def __init__(self, branch_name: _Optional[str] = ...) -> None: ...

class WriteGitCommitMessageRequest(_message.Message):
    __slots__ = ("diffs", "previous_commit_messages", "explicit_context")
    DIFFS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_COMMIT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    diffs: _containers.RepeatedScalarFieldContainer[str]
    previous_commit_messages: _containers.RepeatedScalarFieldContainer[str]
    explicit_context: ExplicitContext
    def __init__(self, diffs: _Optional[_Iterable[str]] = ..., previous_commit_messages: _Optional[_Iterable[str]] = ..., explicit_context: _Optional[_Union[ExplicitContext, _Mapping]] = ...) -> None: ...

class WriteGitCommitMessageResponse(_message.Message):
    __slots__ = ("commit_message",)
    COMMIT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    commit_message: str
    def __init__(self, commit_message: _Optional[str] = ...) -> None: ...
