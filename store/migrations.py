"""The schema, as one ordered list of named, transactional migrations.

Every schema change is a new function appended here; never edit an applied one. Tests build a
database with only the first migration and upgrade it to the latest.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("cursor-byok")


def _run(db: Database, script: str) -> None:
    # Statement by statement: sqlite3's executescript() would COMMIT the migration's transaction.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@migrations()
def m001_initial(db: Database) -> None:
    _run(
        db,
        """
        -- Content-addressed blobs: id = SHA-256(data), 32 raw bytes.
        CREATE TABLE blobs (
            id BLOB PRIMARY KEY,
            data BLOB NOT NULL,
            size INTEGER NOT NULL,
            created_at_ms INTEGER NOT NULL
        );
        -- Reference edges: which blob a blob points at, from which field, at which position.
        CREATE TABLE blob_refs (
            parent BLOB NOT NULL REFERENCES blobs(id),
            field TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            child BLOB NOT NULL,
            PRIMARY KEY (parent, field, ordinal)
        );
        CREATE INDEX blob_refs_child ON blob_refs(child);

        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            head_revision_id INTEGER REFERENCES revisions(id),
            active_request_id TEXT,
            created_at_ms INTEGER NOT NULL,
            updated_at_ms INTEGER NOT NULL
        );
        -- Immutable canonical messages. A runtime event is appended exactly once per conversation.
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            -- 'import' = a client checkpoint taken over (roots and turns we did not write)
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'import')),
            origin TEXT NOT NULL CHECK (origin IN ('user', 'runtime', 'assistant', 'tool', 'imported')),
            payload TEXT NOT NULL,
            runtime_event_id TEXT,
            request_id TEXT,
            created_at_ms INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX messages_runtime_event
            ON messages(conversation_id, runtime_event_id) WHERE runtime_event_id IS NOT NULL;
        -- A revision is its parent's message list plus one message, and the chain is the history.
        CREATE TABLE revisions (
            id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            parent_id INTEGER REFERENCES revisions(id),
            message_id INTEGER NOT NULL REFERENCES messages(id),
            length INTEGER NOT NULL,
            created_at_ms INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX revisions_child ON revisions(conversation_id, ifnull(parent_id, 0), message_id);
        -- Checkpoints we published: the client's roots (minus the system root) identify a revision.
        CREATE TABLE published_states (
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            roots_digest TEXT NOT NULL,
            revision_id INTEGER REFERENCES revisions(id),
            blob_ids TEXT NOT NULL DEFAULT '[]',
            created_at_ms INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, roots_digest)
        );
        -- Logical user inputs (cursor:user:<message_id>) -> the revision before their first use.
        CREATE TABLE input_anchors (
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            input_id TEXT NOT NULL,
            revision_id INTEGER REFERENCES revisions(id),
            created_at_ms INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, input_id)
        );
        -- One row per execution attempt: request_id is the key, the wire run_id is metadata.
        CREATE TABLE runs (
            request_id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            wire_run_id TEXT,
            model_public_id TEXT,
            mode TEXT,
            action TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'canceled')),
            base_revision_id INTEGER REFERENCES revisions(id),
            provider_call_index INTEGER NOT NULL DEFAULT -1,
            usage TEXT,
            error_code TEXT,
            error_message TEXT,
            started_at_ms INTEGER NOT NULL,
            finished_at_ms INTEGER
        );
        CREATE INDEX runs_conversation ON runs(conversation_id, started_at_ms);
        CREATE TABLE tool_rounds (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            request_id TEXT NOT NULL REFERENCES runs(request_id),
            base_revision_id INTEGER REFERENCES revisions(id),
            assistant TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('staged', 'settled', 'abandoned')),
            created_at_ms INTEGER NOT NULL,
            settled_at_ms INTEGER
        );
        CREATE TABLE tool_round_calls (
            round_id TEXT NOT NULL REFERENCES tool_rounds(id),
            call_index INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            name TEXT NOT NULL,
            completion_seq INTEGER,
            is_error INTEGER,
            completed_at_ms INTEGER,
            PRIMARY KEY (round_id, call_index)
        );
        -- One row per real provider request.
        CREATE TABLE llm_calls (
            id INTEGER PRIMARY KEY,
            request_id TEXT NOT NULL,
            conversation_id TEXT,
            call_index INTEGER NOT NULL,
            model_call_id TEXT,
            provider TEXT,
            provider_kind TEXT,
            model_public_id TEXT,
            model TEXT,
            started_at TEXT NOT NULL,
            ttfb_ms REAL,
            ttft_ms REAL,
            total_ms REAL,
            status TEXT NOT NULL,
            finish_reason TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            cache_read_tokens INTEGER,
            cache_write_tokens INTEGER,
            reasoning_tokens INTEGER,
            message_count INTEGER,
            tool_count INTEGER,
            request_bytes INTEGER,
            response_bytes INTEGER,
            error TEXT,
            request_body TEXT,
            raw_response BLOB,
            UNIQUE (request_id, call_index)
        );
        -- Every Connect frame of the agent RPCs, both directions.
        CREATE TABLE frames (
            id INTEGER PRIMARY KEY,
            request_id TEXT NOT NULL,
            conversation_id TEXT,
            seq INTEGER NOT NULL,
            direction TEXT NOT NULL CHECK (direction IN ('down', 'up')),
            ts_ms INTEGER NOT NULL,
            kind TEXT,
            flags INTEGER NOT NULL DEFAULT 0,
            data BLOB NOT NULL
        );
        CREATE INDEX frames_request ON frames(request_id, direction, seq);
        """
    )


@migrations()
def m002_rpc_clients(db: Database) -> None:
    """Who sent each RunSSE: the client's version, for captures and traces."""
    _run(
        db,
        """
        CREATE TABLE rpc_clients (
            request_id TEXT PRIMARY KEY,
            client_version TEXT,
            user_agent TEXT,
            ts_ms INTEGER NOT NULL
        )
        """,
    )


@migrations()
def m003_protocol_drift(db: Database) -> None:
    """Unknown fields and oneof branches seen in agent frames (byok.agent.drift), summed per message
    path, field number, wire type and client version."""
    _run(
        db,
        """
        CREATE TABLE protocol_drift (
            direction TEXT NOT NULL CHECK (direction IN ('down', 'up')),
            path TEXT NOT NULL,
            field_number INTEGER NOT NULL,
            wire_type INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('field', 'oneof_branch')),
            client_version TEXT NOT NULL DEFAULT '',
            count INTEGER NOT NULL,
            first_seen_ms INTEGER NOT NULL,
            last_seen_ms INTEGER NOT NULL,
            example_request_id TEXT NOT NULL,
            PRIMARY KEY (direction, path, field_number, wire_type, kind, client_version)
        )
        """,
    )


def apply(db: Database, *, stop_before: str | None = None) -> None:
    migrations.apply(db, stop_before=stop_before)
