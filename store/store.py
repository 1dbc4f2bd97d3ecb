"""The store: the single source of truth for conversations, on SQLite or PostgreSQL.

One write path: every method runs on the caller's thread (sql.py gives it the connection); the
agent uses `AsyncStore`, which runs them on worker threads so the event loop never waits on disk.
Messages and blobs are never updated in place; revisions form a parent chain; a run can only
extend the head of a conversation it still owns (the revision fence). The fence is a row lock on
the conversation (`FOR UPDATE` on PostgreSQL; SQLite's one writer), so it holds across processes
sharing one PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import db as dbmod

OPEN_AT_SHUTDOWN = "open at shutdown"
"""The `error` the recorder stores for an RPC stream still open when the proxy stopped (verify reads it)."""


class StoreError(Exception):
    """Base of the store's own failures."""


class BlobHashMismatch(StoreError):
    def __init__(self, expected: bytes, actual: bytes) -> None:
        super().__init__(f"Blob hash mismatch: expected {expected.hex()}, data hashes to {actual.hex()}")
        self.expected = expected
        self.actual = actual


class RuntimeEventConflict(StoreError):
    """The same runtime event id was appended before with different content."""


class StaleRun(StoreError):
    """A run tried to change a conversation that a newer run owns now."""


class SubagentConflict(StoreError):
    """A subagent conversation bound to a second Task call that does not resume it, or a Task call
    whose child is another conversation."""


class RunExists(StoreError):
    """A run with this request id was already claimed."""


class ConversationOfAnotherUser(StoreError):
    """A conversation id that belongs to another user (team server): it is never resumed or read."""


FENCE_CHANNEL = "byok_fence"
"""PostgreSQL NOTIFY channel: {"fenced": request id, "by": request id, "conversation_id"} per displaced run."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def blob_id(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def canonical_json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class NewMessage:
    role: str
    origin: str
    payload: dict
    runtime_event_id: str | None = None
    request_id: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    origin: str
    payload: dict
    runtime_event_id: str | None
    request_id: str | None
    revision_id: int
    size: int = 0
    """Length of the stored JSON (what keeping it in memory roughly costs)."""


@dataclass(frozen=True)
class BlobRef:
    field: str
    ordinal: int
    child: bytes


@dataclass(frozen=True)
class SubagentLaunch:
    """What a parent's Task call asked for (subagent_launches): read by its child when it binds."""

    parent_conversation_id: str
    parent_tool_call_id: str
    root_conversation_id: str
    subagent_type: str
    readonly: bool
    depth: int
    """1 for a subagent of a top-level conversation, 2 for a subagent's subagent."""
    resume_agent_id: str | None = None


@dataclass(frozen=True)
class SubagentBinding:
    """A child conversation bound to a Task call, and its head when it bound (None: it was new)."""

    child_conversation_id: str
    base_revision_id: int | None


@dataclass
class GcStats:
    marked: int = 0
    swept: int = 0
    swept_bytes: int = 0
    kept_young: int = 0


@dataclass
class Store:
    db: object
    """sql.SqliteDatabase or sql.PostgresDatabase."""
    clock_ms: object = field(default=now_ms, repr=False)

    @classmethod
    def open(cls, target: str | Path, **kwargs) -> "Store":
        """`target`: a SQLite path, or a postgresql:// URL."""
        return cls(dbmod.connect(target, **kwargs))

    @property
    def dialect(self) -> str:
        return self.db.dialect

    def close(self) -> None:
        self.db.close()

    def _for_update(self) -> str:
        # SQLite has one writer per database; PostgreSQL needs the row lock to serialise writers.
        return " FOR UPDATE" if self.db.dialect == "postgresql" else ""

    def _now(self) -> int:
        return self.clock_ms()  # type: ignore[operator]

    # ---- blobs ----------------------------------------------------------------------------

    def put_blob(self, expected_id: bytes, data: bytes, refs: Iterable[BlobRef] = (), *,
                 user_id: str | None = None) -> bool:
        """Verify SHA-256 and store; True if it was new. Re-putting the same blob is a no-op."""
        return self.put_blobs([(expected_id, data, tuple(refs))], user_id=user_id) == 1

    def put_blobs(self, blobs: Sequence[tuple[bytes, bytes, Sequence[BlobRef]]], *,
                  user_id: str | None = None) -> int:
        """Store many blobs in one transaction (hashes are checked first). Returns how many were new.

        Content is shared by hash; `user_id` (a team user) is granted read access to these blobs, and
        `get_blob(s)` for that user returns only blobs granted to them."""
        for expected, data, _ in blobs:
            actual = blob_id(data)
            if actual != expected:
                raise BlobHashMismatch(expected, actual)
        created = 0
        ts = self._now()
        with self.db.atomic():
            for bid, data, refs in blobs:
                cur = self.db.execute(
                    "INSERT INTO blobs(id, data, size, created_at_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [bid, data, len(data), ts],
                )
                if cur.rowcount:
                    created += 1
                    for ref in refs:
                        self.db.execute(
                            "INSERT INTO blob_refs(parent, field, ordinal, child) VALUES (?, ?, ?, ?)"
                            " ON CONFLICT DO NOTHING",
                            [bid, ref.field, ref.ordinal, ref.child],
                        )
                if user_id is not None:
                    self.db.execute("INSERT INTO blob_grants(user_id, blob_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                    [user_id, bid])
        return created

    def get_blob(self, bid: bytes, *, user_id: str | None = None) -> bytes | None:
        """The blob, or None; for a team user only a blob granted to them (put by their runs)."""
        if user_id is None:
            row = self.db.execute("SELECT data FROM blobs WHERE id = ?", [bid]).fetchone()
        else:
            row = self.db.execute(
                "SELECT b.data FROM blobs b JOIN blob_grants g ON g.blob_id = b.id WHERE b.id = ? AND g.user_id = ?",
                [bid, user_id]).fetchone()
        return None if row is None else bytes(row[0])

    def get_blobs(self, ids: Iterable[bytes], *, user_id: str | None = None) -> dict[bytes, bytes]:
        out = {}
        for bid in ids:
            data = self.get_blob(bid, user_id=user_id)
            if data is not None:
                out[bid] = data
        return out

    def gc(self, *, retention_ms: int, extra_roots: Iterable[bytes] = ()) -> GcStats:
        """Mark-and-sweep: delete blobs unreachable from published states, stored messages and
        `extra_roots` (active runs, pending KV operations), if older than the retention period."""
        stats = GcStats()
        cutoff = self._now() - retention_ms
        blob_type = "BYTEA" if self.db.dialect == "postgresql" else "BLOB"
        with self.db.atomic():
            self.db.execute(f"CREATE TEMP TABLE IF NOT EXISTS gc_mark(id {blob_type} PRIMARY KEY)")
            self.db.execute("DELETE FROM gc_mark")
            roots: set[bytes] = set(extra_roots)
            for (ids_json,) in self.db.execute("SELECT blob_ids FROM published_states").fetchall():
                roots.update(bytes.fromhex(h) for h in json.loads(ids_json))  # rows recorded before m010
            roots.update(bytes(b) for (b,) in self.db.execute("SELECT blob_id FROM published_blobs").fetchall())
            for (payload,) in self.db.execute("SELECT payload FROM messages").fetchall():
                roots.update(bytes.fromhex(h) for h in json.loads(payload).get("blob_refs", []))
            self.db.executemany("INSERT INTO gc_mark(id) VALUES (?) ON CONFLICT DO NOTHING", [(r,) for r in roots])
            self.db.execute(
                """
                WITH RECURSIVE reach(id) AS (
                    SELECT id FROM gc_mark
                    UNION SELECT r.child FROM blob_refs r JOIN reach ON r.parent = reach.id
                )
                INSERT INTO gc_mark(id) SELECT id FROM reach WHERE true ON CONFLICT DO NOTHING
                """
            )
            stats.marked = self.db.execute("SELECT count(*) FROM gc_mark").fetchone()[0]
            stats.kept_young = self.db.execute(
                "SELECT count(*) FROM blobs WHERE id NOT IN (SELECT id FROM gc_mark) AND created_at_ms >= ?",
                [cutoff],
            ).fetchone()[0]
            row = self.db.execute(
                "SELECT count(*), coalesce(sum(size), 0) FROM blobs"
                " WHERE id NOT IN (SELECT id FROM gc_mark) AND created_at_ms < ?",
                [cutoff],
            ).fetchone()
            stats.swept, stats.swept_bytes = int(row[0]), int(row[1])
            self.db.execute(
                "DELETE FROM blob_grants WHERE blob_id IN"
                " (SELECT id FROM blobs WHERE id NOT IN (SELECT id FROM gc_mark) AND created_at_ms < ?)",
                [cutoff],
            )
            self.db.execute(
                "DELETE FROM blob_refs WHERE parent IN"
                " (SELECT id FROM blobs WHERE id NOT IN (SELECT id FROM gc_mark) AND created_at_ms < ?)",
                [cutoff],
            )
            self.db.execute(
                "DELETE FROM blobs WHERE id NOT IN (SELECT id FROM gc_mark) AND created_at_ms < ?", [cutoff]
            )
        return stats

    # ---- conversations, runs ----------------------------------------------------------------

    def _ensure_conversation(self, cid: str, user_id: str | None = None) -> None:
        ts = self._now()
        self.db.execute(
            "INSERT INTO conversations(id, user_id, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            [cid, user_id, ts, ts],
        )

    def conversation(self, cid: str) -> dict | None:
        rows = list(self.db.query("SELECT * FROM conversations WHERE id = ?", [cid]))
        return rows[0] if rows else None

    def claim_run(
        self,
        request_id: str,
        conversation_id: str,
        *,
        wire_run_id: str | None = None,
        model_public_id: str | None = None,
        mode: str | None = None,
        action: str | None = None,
        user_id: str | None = None,
        replica: str | None = None,
    ) -> str | None:
        """Make this run the conversation's owner. Returns the request id it displaced (now
        canceled), if any. A request id can be claimed once. A conversation belongs to the user who
        began it (`user_id`, None = the single user): any other user's claim raises
        ConversationOfAnotherUser and changes nothing. On PostgreSQL the displaced run's replica hears
        of it at once: a NOTIFY on FENCE_CHANNEL, delivered when this claim commits (fence.py)."""
        ts = self._now()
        with self.db.atomic():
            self._ensure_conversation(conversation_id, user_id)
            previous, owner = self.db.execute(
                "SELECT active_request_id, user_id FROM conversations WHERE id = ?" + self._for_update(),
                [conversation_id],
            ).fetchone()
            if owner != user_id:
                raise ConversationOfAnotherUser(
                    f"conversation {conversation_id} belongs to another user; start a new chat")
            if self.db.execute("SELECT 1 FROM runs WHERE request_id = ?", [request_id]).fetchone():
                raise RunExists(f"run {request_id} already exists")
            self.db.execute(
                "INSERT INTO runs(request_id, conversation_id, wire_run_id, model_public_id, mode, action,"
                " status, started_at_ms, user_id, replica) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                [request_id, conversation_id, wire_run_id, model_public_id, mode, action, ts, user_id, replica],
            )
            self.db.execute(
                "UPDATE conversations SET active_request_id = ?, updated_at_ms = ? WHERE id = ?",
                [request_id, ts, conversation_id],
            )
            if previous and previous != request_id:
                self.db.execute(
                    "UPDATE runs SET status = 'canceled', finished_at_ms = ?, error_code = 'canceled',"
                    " error_message = ? WHERE request_id = ? AND status = 'running'",
                    [ts, f"replaced by run {request_id}", previous],
                )
                self.db.execute(
                    "UPDATE llm_calls SET status = 'canceled' WHERE request_id = ? AND status = 'running'",
                    [previous],
                )
                if self.db.dialect == "postgresql":
                    self.db.execute("SELECT pg_notify(?, ?)", [FENCE_CHANNEL, canonical_json(
                        {"fenced": previous, "by": request_id, "conversation_id": conversation_id})])
        return previous if previous != request_id else None

    def run_replica(self, request_id: str) -> str | None:
        """The replica that claimed this request's run, or None (no run, or one without a replica)."""
        row = self.db.execute("SELECT replica FROM runs WHERE request_id = ?", [request_id]).fetchone()
        return None if row is None else row[0]

    def set_run_base(self, request_id: str, revision_id: int | None) -> None:
        self.db.execute("UPDATE runs SET base_revision_id = ? WHERE request_id = ?", [revision_id, request_id])

    def finish_run(
        self, request_id: str, status: str, *, error_code: str | None = None,
        error_message: str | None = None, usage: dict | None = None,
    ) -> bool:
        """Record the terminal state once; a run already finished (e.g. canceled) stays as it is."""
        with self.db.atomic():
            cur = self.db.execute(
                "UPDATE runs SET status = ?, error_code = ?, error_message = ?, usage = ?, finished_at_ms = ?"
                " WHERE request_id = ? AND status = 'running'",
                [status, error_code, error_message, None if usage is None else canonical_json(usage),
                 self._now(), request_id],
            )
            self.db.execute(
                "UPDATE llm_calls SET status = ? WHERE request_id = ? AND status = 'running'",
                ["canceled" if status == "canceled" else "abandoned", request_id],
            )
            if status in ("completed", "failed", "canceled"):
                self.db.execute(
                    "UPDATE conversations SET active_request_id = NULL WHERE active_request_id = ?", [request_id]
                )
        return cur.rowcount == 1

    def run(self, request_id: str) -> dict | None:
        rows = list(self.db.query("SELECT * FROM runs WHERE request_id = ?", [request_id]))
        return rows[0] if rows else None

    def _fence(self, conversation_id: str, request_id: str | None) -> None:
        if request_id is None:
            return
        row = self.db.execute(
            "SELECT active_request_id FROM conversations WHERE id = ?" + self._for_update(), [conversation_id]
        ).fetchone()
        if row is None or row[0] != request_id:
            raise StaleRun(f"run {request_id} no longer owns conversation {conversation_id}")

    # ---- history ------------------------------------------------------------------------------

    def append(
        self,
        conversation_id: str,
        base_revision_id: int | None,
        messages: Sequence[NewMessage],
        *,
        fence_request_id: str | None = None,
        move_head: bool = True,
        blobs: Sequence[tuple[bytes, bytes, Sequence[BlobRef]]] = (),
        user_id: str | None = None,
        anchor: str | None = None,
        run_base: bool = False,
        returning: bool = False,
    ) -> int | None | tuple[int | None, list[StoredMessage]]:
        """Append messages after `base_revision_id` (None = empty history) in one transaction and
        return the new revision. A runtime event already stored with the same payload is replayed
        (not appended twice); with a different payload it is an error. In the same transaction, so a
        turn's way to the provider commits once: `blobs` the messages name (a turn's state snapshot;
        a crash never keeps one without the other; `user_id`: whose, as in put_blobs), the input
        `anchor` first used here (anchor_input), and (`run_base`) the fencing run's base revision.
        `returning`: also return the messages as stored (what messages_since would read back)."""
        ts = self._now()
        with self.db.atomic():
            self._ensure_conversation(conversation_id)
            self._fence(conversation_id, fence_request_id)
            if blobs:
                self.put_blobs(blobs, user_id=user_id)
            if anchor is not None:
                self.db.execute(
                    "INSERT INTO input_anchors(conversation_id, input_id, revision_id, created_at_ms) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING", [conversation_id, anchor, base_revision_id, ts])
            if run_base and fence_request_id is not None:
                self.set_run_base(fence_request_id, base_revision_id)
            revision = base_revision_id
            length = 0 if revision is None else self._length(revision)
            stored: list[StoredMessage] = []
            for msg in messages:
                payload = canonical_json(msg.payload)
                message_id, request_id = None, msg.request_id
                if msg.runtime_event_id is not None:
                    row = self.db.execute(
                        "SELECT id, payload, request_id FROM messages WHERE conversation_id = ? AND runtime_event_id = ?",
                        [conversation_id, msg.runtime_event_id],
                    ).fetchone()
                    if row is not None:
                        if row[1] != payload:
                            raise RuntimeEventConflict(
                                f"runtime event {msg.runtime_event_id} was stored with different content"
                            )
                        message_id, request_id = row[0], row[2]
                if message_id is None:
                    message_id = self.db.execute(
                        "INSERT INTO messages(conversation_id, role, origin, payload, runtime_event_id,"
                        " request_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                        [conversation_id, msg.role, msg.origin, payload, msg.runtime_event_id,
                         msg.request_id, ts],
                    ).fetchone()[0]
                length += 1
                row = self.db.execute(
                    "SELECT id FROM revisions WHERE conversation_id = ? AND coalesce(parent_id, 0) = ?"
                    " AND message_id = ?",
                    [conversation_id, revision or 0, message_id],
                ).fetchone()
                if row is not None:
                    revision = row[0]
                else:
                    revision = self.db.execute(
                        "INSERT INTO revisions(conversation_id, parent_id, message_id, length, created_at_ms)"
                        " VALUES (?, ?, ?, ?, ?) RETURNING id",
                        [conversation_id, revision, message_id, length, ts],
                    ).fetchone()[0]
                if returning:  # read back as messages() would: canonical JSON (sorted keys, no shared dicts)
                    stored.append(StoredMessage(message_id, msg.role, msg.origin, json.loads(payload),
                                                msg.runtime_event_id, request_id, revision, len(payload)))
            if move_head:
                self.db.execute(
                    "UPDATE conversations SET head_revision_id = ?, updated_at_ms = ? WHERE id = ?",
                    [revision, ts, conversation_id],
                )
        return (revision, stored) if returning else revision

    def _length(self, revision_id: int) -> int:
        row = self.db.execute("SELECT length FROM revisions WHERE id = ?", [revision_id]).fetchone()
        if row is None:
            raise StoreError(f"unknown revision {revision_id}")
        return row[0]

    def runtime_event(self, conversation_id: str, event_id: str) -> StoredMessage | None:
        rows = self.db.execute(
            "SELECT id, role, origin, payload, runtime_event_id, request_id FROM messages"
            " WHERE conversation_id = ? AND runtime_event_id = ?",
            [conversation_id, event_id],
        ).fetchall()
        if not rows:
            return None
        r = rows[0]
        return StoredMessage(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], 0, len(r[3]))

    def messages(self, revision_id: int | None) -> list[StoredMessage]:
        """The ordered message list of a revision (empty for None)."""
        if revision_id is None:
            return []
        rows = self.db.execute(
            """
            WITH RECURSIVE chain(id, parent_id, message_id, length) AS (
                SELECT id, parent_id, message_id, length FROM revisions WHERE id = ?
                UNION ALL
                SELECT r.id, r.parent_id, r.message_id, r.length
                FROM revisions r JOIN chain c ON r.id = c.parent_id
            )
            SELECT m.id, m.role, m.origin, m.payload, m.runtime_event_id, m.request_id, chain.id
            FROM chain JOIN messages m ON m.id = chain.message_id
            ORDER BY chain.length
            """,
            [revision_id],
        ).fetchall()
        if not rows:
            raise StoreError(f"unknown revision {revision_id}")
        return [StoredMessage(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], len(r[3])) for r in rows]

    def messages_since(self, revision_id: int, base_revision_id: int | None) -> list[StoredMessage]:
        """The messages a revision adds to one of its ancestors, in order: what an append just
        added, without reading (and decoding) the whole history again."""
        base_length = 0 if base_revision_id is None else self._length(base_revision_id)
        rows = self.db.execute(
            """
            WITH RECURSIVE chain(id, parent_id, message_id, length) AS (
                SELECT id, parent_id, message_id, length FROM revisions WHERE id = ?
                UNION ALL
                SELECT r.id, r.parent_id, r.message_id, r.length
                FROM revisions r JOIN chain c ON r.id = c.parent_id WHERE r.length > ?
            )
            SELECT m.id, m.role, m.origin, m.payload, m.runtime_event_id, m.request_id, chain.id
            FROM chain JOIN messages m ON m.id = chain.message_id
            WHERE chain.length > ?
            ORDER BY chain.length
            """,
            [revision_id, base_length, base_length],
        ).fetchall()
        return [StoredMessage(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], len(r[3])) for r in rows]

    def revision_conversation(self, revision_id: int) -> str | None:
        row = self.db.execute("SELECT conversation_id FROM revisions WHERE id = ?", [revision_id]).fetchone()
        return None if row is None else row[0]

    # ---- published checkpoints and anchors ---------------------------------------------------------

    def record_published(
        self, conversation_id: str, roots_digest: str, revision_id: int | None, blob_ids: Iterable[bytes]
    ) -> None:
        """A checkpoint published for `revision_id`, found again by its roots digest. `blob_ids`: the
        blobs it references directly (GC roots), of which only those not recorded for this
        conversation before need to be named: a warm conversation names what a turn added."""
        ts = self._now()
        with self.db.atomic():
            self._ensure_conversation(conversation_id)
            self.db.execute(
                "INSERT INTO published_states(conversation_id, roots_digest, revision_id, created_at_ms)"
                " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [conversation_id, roots_digest, revision_id, ts],
            )
            self.db.executemany(
                "INSERT INTO published_blobs(conversation_id, blob_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [(conversation_id, b) for b in dict.fromkeys(blob_ids)],
            )

    def find_published(self, conversation_id: str, roots_digest: str) -> tuple[bool, int | None]:
        """(known, revision_id) for a checkpoint we published with these roots."""
        return self._revision_row("SELECT revision_id FROM published_states WHERE conversation_id = ? AND roots_digest = ?",
                                  [conversation_id, roots_digest])

    def find_anchor(self, conversation_id: str, input_id: str) -> tuple[bool, int | None]:
        """(existed, the revision before the input's first use); a read: `append(anchor=...)` writes it."""
        return self._revision_row("SELECT revision_id FROM input_anchors WHERE conversation_id = ? AND input_id = ?",
                                  [conversation_id, input_id])

    def _revision_row(self, sql: str, params: list) -> tuple[bool, int | None]:
        row = self.db.execute(sql, params).fetchone()
        return (False, None) if row is None else (True, row[0])

    def anchor_input(self, conversation_id: str, input_id: str, revision_id: int | None) -> tuple[bool, int | None]:
        """Persist `input_id -> revision before it` the first time; return (existed, anchored revision)."""
        with self.db.atomic():
            self._ensure_conversation(conversation_id)
            existed, anchored = self.find_anchor(conversation_id, input_id)
            if existed:
                return True, anchored
            self.db.execute(
                "INSERT INTO input_anchors(conversation_id, input_id, revision_id, created_at_ms) VALUES (?, ?, ?, ?)",
                [conversation_id, input_id, revision_id, self._now()],
            )
        return False, revision_id

    # ---- input that arrived while a run worked -------------------------------------------------

    def queue_input(self, conversation_id: str, injection_id: str, request_id: str, action: bytes,
                    received_at_ms: int) -> str:
        """Keep an input before it is acknowledged. Returns its status: 'queued' for a new one (or
        one still waiting, whose content this one replaces), else what became of it before."""
        ts = self._now()
        with self.db.atomic():
            self._ensure_conversation(conversation_id)
            cur = self.db.execute(
                "INSERT INTO queued_inputs(conversation_id, injection_id, request_id, action, received_at_ms,"
                " status, updated_at_ms) VALUES (?, ?, ?, ?, ?, 'queued', ?) ON CONFLICT DO NOTHING",
                [conversation_id, injection_id, request_id, action, received_at_ms, ts],
            )
            if cur.rowcount == 1:
                return "queued"
            row = self.db.execute(
                "SELECT status FROM queued_inputs WHERE conversation_id = ? AND injection_id = ?" + self._for_update(),
                [conversation_id, injection_id],
            ).fetchone()
            if row[0] == "queued":
                self.db.execute(
                    "UPDATE queued_inputs SET action = ?, request_id = ?, updated_at_ms = ?"
                    " WHERE conversation_id = ? AND injection_id = ?",
                    [action, request_id, ts, conversation_id, injection_id],
                )
            return row[0]

    def queued_inputs(self, conversation_id: str, statuses: Sequence[str] = ("queued", "delivered")) -> list[dict]:
        """The conversation's kept inputs with these statuses, in arrival order."""
        marks = ", ".join("?" * len(statuses))
        rows = self.db.execute(
            "SELECT injection_id, request_id, action, received_at_ms, status, revision_id FROM queued_inputs"
            f" WHERE conversation_id = ? AND status IN ({marks}) ORDER BY seq",
            [conversation_id, *statuses],
        ).fetchall()
        keys = ("injection_id", "request_id", "action", "received_at_ms", "status", "revision_id")
        return [{**dict(zip(keys, r)), "action": bytes(r[2])} for r in rows]

    def mark_inputs(self, conversation_id: str, injection_ids: Sequence[str], status: str,
                    revision_id: int | None = None) -> None:
        """Record what became of inputs: 'delivered' (at revision_id), 'cancelled' or 'superseded'."""
        ts = self._now()
        with self.db.atomic():
            for injection_id in injection_ids:
                self.db.execute(
                    "UPDATE queued_inputs SET status = ?, revision_id = ?, updated_at_ms = ?"
                    " WHERE conversation_id = ? AND injection_id = ?",
                    [status, revision_id, ts, conversation_id, injection_id],
                )

    # ---- tool rounds ----------------------------------------------------------------------------

    # ---- subagents ------------------------------------------------------------------------------

    def record_subagent_launch(self, launch: "SubagentLaunch") -> None:
        """What a parent's Task call asked for, stored before its exec goes out (a re-run of the
        same call after a crash replaces it)."""
        self.db.execute(
            "INSERT INTO subagent_launches(parent_conversation_id, parent_tool_call_id, root_conversation_id,"
            " subagent_type, readonly, depth, resume_agent_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (parent_conversation_id, parent_tool_call_id) DO UPDATE SET"
            " root_conversation_id = excluded.root_conversation_id, subagent_type = excluded.subagent_type,"
            " readonly = excluded.readonly, depth = excluded.depth, resume_agent_id = excluded.resume_agent_id,"
            " created_at_ms = excluded.created_at_ms",
            [launch.parent_conversation_id, launch.parent_tool_call_id, launch.root_conversation_id,
             launch.subagent_type, int(launch.readonly), launch.depth, launch.resume_agent_id, self._now()])

    def bind_subagent(self, child_conversation_id: str, parent_tool_call_id: str, group_id: str | None,
                      subagent_type: str | None) -> "SubagentLaunch | None":
        """Bind a subagent conversation to the Task call that launched it (its X-Parent-Agent-Tool-Call-Id)
        and return that call's launch, or None when no parent here launched it. Among launches with
        that call id, the one of the child's conversation group (`group_id`, the root conversation)
        that names this child for resume, else the one bound to it already, else an unbound one (with
        no group id, only if it is the only unbound one). A child is bound to one call, except when a later call resumes it; a call launches one child.
        Both are a SubagentConflict otherwise."""
        with self.db.atomic():
            rows = self.db.execute(
                "SELECT parent_conversation_id, parent_tool_call_id, root_conversation_id, subagent_type, readonly,"
                " depth, resume_agent_id FROM subagent_launches WHERE parent_tool_call_id = ? ORDER BY created_at_ms DESC",
                [parent_tool_call_id]).fetchall()
            launches = [SubagentLaunch(r[0], r[1], r[2], r[3], bool(r[4]), int(r[5]), r[6]) for r in rows]
            if group_id:
                launches = [x for x in launches if group_id in (x.root_conversation_id, x.parent_conversation_id)]
            children = dict(self.db.execute(
                "SELECT parent_conversation_id, child_conversation_id FROM subagents WHERE parent_tool_call_id = ?"
                " AND parent_conversation_id IS NOT NULL", [parent_tool_call_id]).fetchall())
            unbound = [x for x in launches if x.parent_conversation_id not in children]
            launch = next((x for x in launches if x.resume_agent_id == child_conversation_id), None) or next(
                (x for x in launches if children.get(x.parent_conversation_id) == child_conversation_id), None)
            if launch is None and len(unbound) > 1 and not group_id:
                # with no group to tell them apart, the newest could be another conversation's call
                parents = ", ".join(sorted(x.parent_conversation_id for x in unbound))
                raise SubagentConflict(f"conversation {child_conversation_id} names Task call {parent_tool_call_id!r},"
                                       f" which conversations {parents} each launched; without a conversation"
                                       " group id it cannot be told which")
            launch = launch or next(iter(unbound), None)
            if launch is None and launches:
                x = launches[0]
                raise SubagentConflict(f"Task call {parent_tool_call_id!r} of conversation {x.parent_conversation_id} "
                                       f"launched conversation {children[x.parent_conversation_id]}, not "
                                       f"{child_conversation_id}")
            resumed = launch is not None and launch.resume_agent_id == child_conversation_id
            other = self.db.execute(
                "SELECT parent_tool_call_id FROM subagents WHERE child_conversation_id = ? AND parent_tool_call_id <> ?"
                " ORDER BY created_at_ms LIMIT 1", [child_conversation_id, parent_tool_call_id]).fetchone()
            if other is not None and not resumed:
                raise SubagentConflict(f"conversation {child_conversation_id} is the subagent of Task call "
                                       f"{other[0]!r}, and Task call {parent_tool_call_id!r} does not resume it")
            parent = launch.parent_conversation_id if launch is not None else None
            head = self.db.execute("SELECT head_revision_id FROM conversations WHERE id = ?",
                                   [child_conversation_id]).fetchone()
            self.db.execute(
                "INSERT INTO subagents(child_conversation_id, parent_tool_call_id, parent_conversation_id,"
                " subagent_type, base_revision_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [child_conversation_id, parent_tool_call_id, parent, subagent_type,
                 head[0] if head is not None else None, self._now()])
            if parent is not None:
                self.db.execute("UPDATE subagents SET parent_conversation_id = ? WHERE child_conversation_id = ?"
                                " AND parent_tool_call_id = ? AND parent_conversation_id IS NULL",
                                [parent, child_conversation_id, parent_tool_call_id])
            return launch

    def subagent_of_call(self, parent_conversation_id: str, parent_tool_call_id: str) -> "SubagentBinding | None":
        """The child conversation a parent's Task call launched (or resumed), or None."""
        row = self.db.execute(
            "SELECT child_conversation_id, base_revision_id FROM subagents WHERE parent_conversation_id = ?"
            " AND parent_tool_call_id = ? ORDER BY created_at_ms DESC LIMIT 1",
            [parent_conversation_id, parent_tool_call_id]).fetchone()
        return None if row is None else SubagentBinding(row[0], row[1])

    def head_revision(self, conversation_id: str) -> int | None:
        row = self.db.execute("SELECT head_revision_id FROM conversations WHERE id = ?", [conversation_id]).fetchone()
        return None if row is None else row[0]

    def head_messages(self, conversation_id: str) -> list[StoredMessage]:
        """The messages of a conversation's head revision (empty when it has none)."""
        row = self.db.execute("SELECT head_revision_id FROM conversations WHERE id = ?", [conversation_id]).fetchone()
        return self.messages(row[0]) if row is not None and row[0] is not None else []

    def stage_round(
        self, round_id: str, conversation_id: str, request_id: str, base_revision_id: int | None,
        assistant: dict, calls: Sequence[tuple[int, str, str]], *, created_at_ms: int | None = None,
    ) -> None:
        with self.db.atomic():
            self._fence(conversation_id, request_id)
            self.db.execute(
                "INSERT INTO tool_rounds(id, conversation_id, request_id, base_revision_id, assistant, status,"
                " created_at_ms) VALUES (?, ?, ?, ?, ?, 'staged', ?)",
                [round_id, conversation_id, request_id, base_revision_id, canonical_json(assistant),
                 created_at_ms if created_at_ms is not None else self._now()],
            )
            for index, call_id, name in calls:
                self.db.execute(
                    "INSERT INTO tool_round_calls(round_id, call_index, call_id, name) VALUES (?, ?, ?, ?)",
                    [round_id, index, call_id, name],
                )

    def complete_call(
        self, round_id: str, call_index: int, conversation_id: str, base_revision_id: int | None,
        messages: Sequence[NewMessage], *, fence_request_id: str, is_error: bool, returning: bool = False,
    ) -> tuple[int, int | None] | tuple[int, int | None, list[StoredMessage]]:
        """Atomically append one result's (assistant(call), tool(result)) pair and mark the call
        complete. Returns (completion_seq, new revision), and the pair as stored when `returning`."""
        with self.db.atomic():
            self._fence(conversation_id, fence_request_id)  # first: completions of one round queue here
            seq = self.db.execute(
                "SELECT count(*) FROM tool_round_calls WHERE round_id = ? AND completion_seq IS NOT NULL",
                [round_id],
            ).fetchone()[0]
            cur = self.db.execute(
                "UPDATE tool_round_calls SET completion_seq = ?, is_error = ?, completed_at_ms = ?"
                " WHERE round_id = ? AND call_index = ? AND completion_seq IS NULL",
                [seq, int(is_error), self._now(), round_id, call_index],
            )
            if cur.rowcount != 1:
                raise StoreError(f"call {call_index} of round {round_id} is unknown or already complete")
            appended = self.append(conversation_id, base_revision_id, messages, fence_request_id=fence_request_id,
                                   returning=returning)
        return (seq, *appended) if returning else (seq, appended)

    def settle_round(self, round_id: str, status: str = "settled") -> None:
        self.db.execute(
            "UPDATE tool_rounds SET status = ?, settled_at_ms = ? WHERE id = ? AND status = 'staged'",
            [status, self._now(), round_id],
        )

    # ---- llm calls, frames ------------------------------------------------------------------------

    def begin_llm_call(self, row: dict) -> int:
        """Persist the call (and the run's provider_call_index) before the HTTP request goes out."""
        row = {**row, "status": "running"}
        columns = _columns(row)
        with self.db.atomic():
            call_id = self.db.execute(
                f"INSERT INTO llm_calls({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) RETURNING id",
                [row[c] for c in columns],
            ).fetchone()[0]
            self.db.execute(
                "UPDATE runs SET provider_call_index = ? WHERE request_id = ?",
                [row["call_index"], row["request_id"]],
            )
        return int(call_id)

    def begin_one_shot_call(self, row: dict) -> int:
        """A provider call outside any run (addon/assist/: commit messages, Cmd-K, ...), numbered after
        the calls its request id already has: a client may send one x-request-id more than once."""
        row = {**row, "status": "running"}
        columns = _columns(row)
        with self.db.atomic():
            index = self.db.execute("SELECT coalesce(max(call_index) + 1, 0) FROM llm_calls WHERE request_id = ?",
                                    [row["request_id"]]).fetchone()[0]
            return int(self.db.execute(
                f"INSERT INTO llm_calls({', '.join(columns)}, call_index)"
                f" VALUES ({', '.join('?' * (len(columns) + 1))}) RETURNING id",
                [row[c] for c in columns] + [index],
            ).fetchone()[0])

    def finish_llm_call(self, call_id: int, updates: dict) -> None:
        if updates:
            columns = _columns(updates)
            self.db.execute(
                f"UPDATE llm_calls SET {', '.join(c + ' = ?' for c in columns)} WHERE id = ?",
                [updates[c] for c in columns] + [call_id],
            )

    def record_clients(self, rows: Sequence[dict]) -> None:
        """rows: {request_id, client_version, user_agent, ts_ms}; the first sighting of a request wins."""
        with self.db.atomic():
            for row in rows:
                self.db.execute(
                    "INSERT INTO rpc_clients(request_id, client_version, user_agent, ts_ms, user_id)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [row["request_id"], row.get("client_version"), row.get("user_agent"), row["ts_ms"],
                     row.get("user_id")])

    FRAME_COLUMNS = ("request_id", "conversation_id", "seq", "direction", "ts_ms", "kind", "flags", "data")

    def record_drift(self, rows: Sequence) -> None:
        """Add tallies of unknown protocol fields (byok.agent.drift.DriftRow) to the running sums."""
        least, greatest = ("least", "greatest") if self.db.dialect == "postgresql" else ("min", "max")
        with self.db.atomic():
            for r in rows:
                self.db.execute(
                    "INSERT INTO protocol_drift AS d(direction, path, field_number, wire_type, kind, client_version,"
                    " count, first_seen_ms, last_seen_ms, example_request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(direction, path, field_number, wire_type, kind, client_version) DO UPDATE SET"
                    " count = d.count + excluded.count,"
                    f" first_seen_ms = {least}(d.first_seen_ms, excluded.first_seen_ms),"
                    " example_request_id = CASE WHEN excluded.last_seen_ms >= d.last_seen_ms"
                    "   THEN excluded.example_request_id ELSE d.example_request_id END,"
                    f" last_seen_ms = {greatest}(d.last_seen_ms, excluded.last_seen_ms)",
                    [r.direction, r.path, r.field_number, r.wire_type, r.kind, r.client_version, r.count,
                     r.first_seen_ms, r.last_seen_ms, r.example_request_id])

    def record_frames(self, rows: Sequence[dict]) -> None:
        if rows:
            with self.db.atomic():
                self.db.executemany(
                    f"INSERT INTO frames({', '.join(self.FRAME_COLUMNS)}) VALUES ({', '.join('?' * 8)})",
                    [[row.get(c, 0 if c == "flags" else None) for c in self.FRAME_COLUMNS] for row in rows],
                )

    STREAM_COLUMNS = ("request_id", "rpc", "host", "http_version", "header_names", "headers", "first_kinds", "route",
                      "started_ms", "request_end_ms", "response_end_ms", "error")
    APPEND_COLUMNS = ("request_id", "seqno", "form", "content_type", "content_encoding", "kind", "problem",
                      "arrived_us")

    def record_wire_facts(self, streams: Sequence[dict] = (), appends: Sequence[dict] = (),
                          hosts: Sequence[dict] = ()) -> None:
        """What `cursor-byok verify` reads besides frames (migration m010): finished agent streams,
        BidiAppend arrivals, and per-host counts of what the router made of each flow (summed)."""
        least, greatest = ("least", "greatest") if self.db.dialect == "postgresql" else ("min", "max")
        with self.db.atomic():
            for table, columns, rows in (("rpc_streams", self.STREAM_COLUMNS, streams),
                                         ("bidi_appends", self.APPEND_COLUMNS, appends)):
                if rows:
                    self.db.executemany(
                        f"INSERT INTO {table}({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [[row.get(c) for c in columns] for row in rows])
            for h in hosts:
                self.db.execute(
                    "INSERT INTO wire_hosts AS w(host, rpc, matched, count, first_seen_ms, last_seen_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(host, rpc) DO UPDATE SET"
                    " count = w.count + excluded.count, matched = excluded.matched,"
                    f" first_seen_ms = {least}(w.first_seen_ms, excluded.first_seen_ms),"
                    f" last_seen_ms = {greatest}(w.last_seen_ms, excluded.last_seen_ms)",
                    [h["host"], h["rpc"], int(h["matched"]), h["count"], h["first_seen_ms"], h["last_seen_ms"]])

    TAB_POSITION_COLUMNS = ("request_id", "source", "ts_ms", "client_version", "cursor_line", "cursor_column",
                            "contents_start_at_line", "contents_lines", "total_lines", "line_ending", "column_fits",
                            "range_start", "range_end")

    def record_tab_position(self, row: dict) -> None:
        """Where one Tab request put its cursor (migration m011; assist.tab_edit.position_facts)."""
        columns = self.TAB_POSITION_COLUMNS
        self.db.execute(f"INSERT INTO tab_positions({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [row.get(c) for c in columns])

    def next_frame_seq(self, request_id: str, direction: str) -> int:
        """The next frame number of (request, direction): 0 for a request never recorded."""
        row = self.db.execute(
            "SELECT max(seq) FROM frames WHERE request_id = ? AND direction = ?", [request_id, direction]
        ).fetchone()
        return 0 if row is None or row[0] is None else row[0] + 1

    def fill_frame_conversation(self, request_id: str, conversation_id: str) -> None:
        """Frames of a request recorded before its run_request named the conversation."""
        self.db.execute(
            "UPDATE frames SET conversation_id = ? WHERE request_id = ? AND conversation_id IS NULL",
            [conversation_id, request_id],
        )

    def usage_since(self, user_id: str | None, since_ms: int) -> dict[tuple[str | None, str | None], dict[str, int]]:
        """Tokens of `user_id`'s provider calls in runs started at or after `since_ms` (`usage_since`)."""
        return usage_since(self.db, user_id, since_ms)

    def count(self, table: str) -> int:
        """Rows in one of the store's tables (for tests, doctor and benchmarks)."""
        if not table.replace("_", "").isalnum():
            raise ValueError(f"not a table name: {table!r}")
        return int(self.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def usage_since(db, user_id: str | None, since_ms: int) -> dict[tuple[str | None, str | None], dict[str, int]]:
    """Tokens of `user_id`'s provider calls in runs started at or after `since_ms`, and of their one-shot
    calls (no run) started since then, per (model
    public id, provider kind): {input, output, cache_read, cache_write}, as the providers reported
    them (Anthropic reports cache reads and writes apart from input; OpenAI includes them). `db` is
    the store's database or a read connection of the CLI and dashboard (anything with `execute`):
    the budget check and the dashboard's budget page read the same numbers."""
    since = datetime.fromtimestamp(since_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    rows = db.execute(
        "SELECT c.model_public_id, c.provider_kind, sum(coalesce(c.input_tokens, 0)),"
        " sum(coalesce(c.output_tokens, 0)), sum(coalesce(c.cache_read_tokens, 0)),"
        " sum(coalesce(c.cache_write_tokens, 0))"
        " FROM llm_calls c LEFT JOIN runs r ON r.request_id = c.request_id"
        " WHERE (r.user_id = ? AND r.started_at_ms >= ?)"
        " OR (r.request_id IS NULL AND c.user_id = ? AND c.started_at >= ?)"  # one-shot calls (Tab, ...)
        " GROUP BY c.model_public_id, c.provider_kind",
        [user_id, since_ms, user_id, since],
    ).fetchall()
    return {(r[0], r[1]): {"input": int(r[2]), "output": int(r[3]), "cache_read": int(r[4]),
                           "cache_write": int(r[5])} for r in rows}


def _columns(row: dict) -> list[str]:
    """Column names of a row built by our own code; refuse anything that is not a plain name."""
    columns = list(row)
    for c in columns:
        if not c.replace("_", "").isalnum():
            raise ValueError(f"not a column name: {c!r}")
    return columns
