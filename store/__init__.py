"""The store: blobs, canonical history, runs, llm calls, frames; on SQLite (a path, via sqlite-utils)
or PostgreSQL (a postgresql:// URL, via psycopg 3), behind one interface.

    from byok.store import Store, AsyncStore
"""

from .aio import AsyncStore
from .db import DatabaseUnavailable
from .store import (
    BlobHashMismatch, BlobRef, ConversationOfAnotherUser, GcStats, NewMessage, RunExists, RuntimeEventConflict, StaleRun, Store,
    SubagentBinding, SubagentConflict, SubagentLaunch,
    StoreError, StoredMessage, blob_id, canonical_json, now_ms,
)

__all__ = [
    "AsyncStore", "BlobHashMismatch", "ConversationOfAnotherUser", "DatabaseUnavailable", "BlobRef", "GcStats", "NewMessage", "RunExists",
    "RuntimeEventConflict", "StaleRun", "Store", "StoreError", "StoredMessage", "SubagentBinding", "SubagentConflict", "SubagentLaunch",
    "blob_id",
    "canonical_json", "now_ms",
]
