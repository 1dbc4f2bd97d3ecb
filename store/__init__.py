"""SQLite store (via sqlite-utils): blobs, canonical history, runs, llm calls, frames.

    from byok.store import Store, AsyncStore
"""

from .aio import AsyncStore
from .store import (
    BlobHashMismatch, BlobRef, GcStats, NewMessage, RunExists, RuntimeEventConflict, StaleRun, Store,
    StoreError, StoredMessage, blob_id, canonical_json, now_ms,
)

__all__ = [
    "AsyncStore", "BlobHashMismatch", "BlobRef", "GcStats", "NewMessage", "RunExists",
    "RuntimeEventConflict", "StaleRun", "Store", "StoreError", "StoredMessage", "blob_id",
    "canonical_json", "now_ms",
]
