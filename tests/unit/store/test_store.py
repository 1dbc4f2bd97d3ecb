"""The store: migrations, blob CAS, append-only history, runtime events, the revision fence, GC."""

import hashlib

import pytest
from hypothesis import given, settings, strategies as st
from sqlite_utils import Database

from byok.store import (
    BlobHashMismatch, BlobRef, NewMessage, RunExists, RuntimeEventConflict, StaleRun, Store, blob_id,
)
from byok.store import db as dbmod
from byok.store import migrations


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "byok.db")
    yield s
    s.close()


def msg(text, **kw):
    return NewMessage("user", "runtime", {"kind": "runtime", "text": text}, **kw)


def test_pragmas(store):
    conn = store.db.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == dbmod.BUSY_TIMEOUT_MS


def test_first_migration_database_upgrades_to_latest(tmp_path):
    path = tmp_path / "old.db"
    first = migrations.migrations._migrations[0].name
    later = [m.name for m in migrations.migrations._migrations[1:]]
    db = Database(str(path))
    if later:
        migrations.migrations.apply(db, stop_before=later[0])
    else:
        migrations.migrations.apply(db)
    assert [m.name for m in migrations.migrations.applied(db)] == [first]
    db.conn.execute("INSERT INTO conversations(id, created_at_ms, updated_at_ms) VALUES ('c', 1, 1)")
    db.conn.commit()
    db.conn.close()
    store = Store.open(path)  # applies the rest
    assert [m.name for m in migrations.migrations.applied(store.db)] == [m.name for m in migrations.migrations._migrations]
    assert store.conversation("c") is not None
    store.close()


def test_blob_put_verifies_hash_and_is_idempotent(store):
    data = b"hello"
    assert store.put_blob(blob_id(data), data) is True
    assert store.put_blob(blob_id(data), data) is False
    assert store.get_blob(blob_id(data)) == data
    with pytest.raises(BlobHashMismatch, match="Blob hash mismatch"):
        store.put_blob(blob_id(b"other"), data)


def test_blob_mismatch_in_a_batch_stores_nothing(store):
    good, bad = b"good", b"bad"
    with pytest.raises(BlobHashMismatch):
        store.put_blobs([(blob_id(good), good, ()), (blob_id(b"x"), bad, ())])
    assert store.get_blob(blob_id(good)) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=2000), max_size=10))
def test_blob_round_trip_property(tmp_path_factory, blobs):
    store = Store.open(tmp_path_factory.mktemp("p") / "b.db")
    try:
        for data in blobs:
            store.put_blob(hashlib.sha256(data).digest(), data)
            store.put_blob(hashlib.sha256(data).digest(), data)
        for data in blobs:
            assert store.get_blob(hashlib.sha256(data).digest()) == data
        assert store.db.execute("SELECT count(*) FROM blobs").fetchone()[0] == len(set(blobs))
    finally:
        store.close()


def test_history_is_a_parent_chain_and_branches_never_rewrite(store):
    store.claim_run("r1", "c")
    a = store.append("c", None, [msg("a")], fence_request_id="r1")
    b = store.append("c", a, [msg("b")], fence_request_id="r1")
    c = store.append("c", a, [msg("c")], fence_request_id="r1")  # a branch from a
    assert [m.payload["text"] for m in store.messages(b)] == ["a", "b"]
    assert [m.payload["text"] for m in store.messages(c)] == ["a", "c"]
    assert store.conversation("c")["head_revision_id"] == c


def test_runtime_event_is_appended_exactly_once(store):
    store.claim_run("r1", "c")
    first = store.append("c", None, [msg("x", runtime_event_id="run-request:r1")], fence_request_id="r1")
    again = store.append("c", None, [msg("x", runtime_event_id="run-request:r1")], fence_request_id="r1")
    assert first == again
    assert store.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    with pytest.raises(RuntimeEventConflict):
        store.append("c", None, [msg("different", runtime_event_id="run-request:r1")], fence_request_id="r1")


def test_revision_fence_stops_a_replaced_run(store):
    store.claim_run("old", "c")
    base = store.append("c", None, [msg("a")], fence_request_id="old")
    assert store.claim_run("new", "c") == "old"
    assert store.run("old")["status"] == "canceled"
    with pytest.raises(StaleRun):
        store.append("c", base, [msg("late")], fence_request_id="old")
    assert store.finish_run("old", "completed") is False  # a canceled run stays canceled
    assert store.run("old")["status"] == "canceled"
    with pytest.raises(RunExists):
        store.claim_run("old", "c")


def test_input_anchor_is_persistent_and_idempotent(store):
    store.claim_run("r", "c")
    first = store.append("c", None, [msg("a")], fence_request_id="r")
    assert store.anchor_input("c", "cursor:user:m1", first) == (False, first)
    later = store.append("c", first, [msg("b")], fence_request_id="r")
    assert store.anchor_input("c", "cursor:user:m1", later) == (True, first)


def test_tool_round_completion_order_and_atomic_pairs(store):
    store.claim_run("r", "c")
    base = store.append("c", None, [msg("q")], fence_request_id="r")
    store.stage_round("round-1", "c", "r", base, {"a": 1}, [(0, "call-a", "Read"), (1, "call-b", "Read")])
    pair = lambda cid: [NewMessage("assistant", "assistant", {"kind": "assistant", "c": cid}),
                        NewMessage("tool", "tool", {"kind": "tool", "c": cid})]
    seq, rev = store.complete_call("round-1", 1, "c", base, pair("b"), fence_request_id="r", is_error=False)
    assert seq == 0
    seq, rev = store.complete_call("round-1", 0, "c", rev, pair("a"), fence_request_id="r", is_error=False)
    assert seq == 1
    assert [m.payload.get("c") for m in store.messages(rev)] == [None, "b", "b", "a", "a"]
    store.settle_round("round-1")
    assert store.db.execute("SELECT status FROM tool_rounds").fetchone()[0] == "settled"


def test_gc_sweeps_only_unreachable_old_blobs(store):
    clock = [1_000_000]
    store.clock_ms = lambda: clock[0]
    keep_child, keep_root, orphan, young = b"child", b"root", b"orphan", b"young"
    store.put_blob(blob_id(keep_child), keep_child)
    store.put_blob(blob_id(keep_root), keep_root, [BlobRef("turns", 0, blob_id(keep_child))])
    store.put_blob(blob_id(orphan), orphan)
    store.record_published("c", "digest", None, [blob_id(keep_root)])
    clock[0] += 10_000
    store.put_blob(blob_id(young), young)
    stats = store.gc(retention_ms=5_000)
    assert stats.swept == 1 and stats.kept_young == 1
    assert store.get_blob(blob_id(orphan)) is None
    for data in (keep_child, keep_root, young):
        assert store.get_blob(blob_id(data)) == data
