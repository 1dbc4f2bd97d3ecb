"""The store: migrations, blob CAS, append-only history, runtime events, the revision fence, GC.

Every test that takes `store` (or `db_target`) runs twice: on SQLite and on a real PostgreSQL server
(tests/conftest.py starts one for the session).
"""

import hashlib
import json
import threading

import pytest
from hypothesis import given, settings, strategies as st
from sqlite_utils import Database

from byok.store import (
    BlobHashMismatch, BlobRef, NewMessage, RunExists, RuntimeEventConflict, StaleRun, Store, SubagentBinding, blob_id,
    canonical_json,
)
from byok.store import db as dbmod
from byok.store import migrations
from tests.support.waiting import until


@pytest.fixture
def store(db_target):
    s = Store.open(db_target)
    yield s
    s.close()


@pytest.fixture
def fresh_target(request, tmp_path_factory, db_target):
    """A factory of new, empty store locations on the backend of `db_target` (for property tests)."""

    def make() -> str:
        if not db_target.startswith("postgresql://"):
            return str(tmp_path_factory.mktemp("p") / "b.db")
        return request.getfixturevalue("pg_server").create_schema_url("byok_tests")

    return make


def msg(text, **kw):
    return NewMessage("user", "runtime", {"kind": "runtime", "text": text}, **kw)


def all_at_once(work, n: int) -> list[Exception]:
    """Calls work(0) .. work(n - 1), each in its own thread, released together; returns what they raised."""
    errors: list[Exception] = []
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_pragmas(tmp_path):
    store = Store.open(tmp_path / "byok.db")
    conn = store.db.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == dbmod.BUSY_TIMEOUT_MS
    store.close()


def test_first_migration_database_upgrades_to_latest(db_target):
    first = migrations.migrations._migrations[0].name
    later = [m.name for m in migrations.migrations._migrations[1:]]
    db = dbmod.connect_postgres(db_target, migrate=False) if db_target.startswith("postgresql://") \
        else dbmod.SqliteDatabase(Database(db_target).conn)
    migrations.apply(db, stop_before=later[0] if later else None)
    assert migrations.applied(db) == [first]
    db.execute("INSERT INTO conversations(id, created_at_ms, updated_at_ms) VALUES ('c', 1, 1)")
    db.close()
    store = Store.open(db_target)  # applies the rest
    assert migrations.applied(store.db) == [m.name for m in migrations.migrations._migrations]
    assert store.conversation("c") is not None
    store.close()


def test_state_snapshots_move_out_of_the_message_rows(db_target):
    """Migration m013: a turn stored with its state snapshot inline (base64 in its JSON; blob_refs as
    rows of any age had them) keeps only the snapshot's id; the snapshot is a blob, granted to the
    conversation's user; the history reads and projects as if it had been written so; GC still
    keeps what published checkpoints named before (published_states.blob_ids) and after."""
    from byok.agent.cursor import projection as proj
    from tests.support.histories import History

    old_db = dbmod.connect_postgres(db_target, migrate=False) if db_target.startswith("postgresql://") \
        else dbmod.SqliteDatabase(Database(db_target).conn)
    migrations.apply(old_db, stop_before="m013_incremental_history")
    old_db.execute("INSERT INTO conversations(id, user_id, created_at_ms, updated_at_ms) VALUES ('c', 'ann', 1, 1)")
    old = History(inline_state=True).run([("turn",), ("answer", True), ("turn",), ("answer", False)])
    published = [proj.sha256(b"named by an old checkpoint")]
    for n, msg in enumerate(old.messages, start=1):
        payload = msg.payload
        if n == 1:
            payload["blob_refs"] = []  # rows older still named nothing
        old_db.execute("INSERT INTO messages(conversation_id, role, origin, payload, runtime_event_id, request_id,"
                       " created_at_ms) VALUES ('c', ?, ?, ?, ?, ?, 1)",
                       [msg.role, msg.origin, canonical_json(payload), msg.runtime_event_id, msg.request_id])
        old_db.execute("INSERT INTO revisions(conversation_id, parent_id, message_id, length, created_at_ms)"
                       " VALUES ('c', ?, ?, ?, 1)", [n - 1 if n > 1 else None, n, n])
    old_db.execute("INSERT INTO blobs(id, data, size, created_at_ms) VALUES (?, ?, 1, 1)", [published[0], b"x"])
    old_db.execute("INSERT INTO published_states(conversation_id, roots_digest, revision_id, blob_ids, created_at_ms)"
                   " VALUES ('c', 'digest', 4, ?, 1)", [json.dumps([published[0].hex()])])
    old_db.close()

    store = Store.open(db_target)  # applies m013
    migrated = store.messages(4)
    turns = [m for m in migrated if m.payload["kind"] == "runtime"]
    now = History().run([("turn",), ("answer", True), ("turn",), ("answer", False)])  # as written today
    assert [m.payload for m in migrated] == [m.payload for m in now.messages]
    for turn in turns:
        assert "state_blob" not in turn.payload["turn"]
        state_id = bytes.fromhex(turn.payload["blob_refs"][1])
        assert store.get_blob(state_id, user_id="ann") == old.blobs[state_id]
    ctx = proj.ProjectionContext("sys", (), b"", 1)
    assert proj.project(migrated, ctx).state_bytes() == proj.project(now.messages, ctx).state_bytes()
    named_now = proj.sha256(b"named now")
    store.put_blob(named_now, b"named now")
    store.record_published("c", "digest-2", 4, [named_now])
    assert store.count("published_blobs") == 1
    stats = store.gc(retention_ms=0)
    assert stats.swept == 0  # the old checkpoint's blob, the new one's, the snapshots (named by messages)
    assert store.get_blob(published[0]) == b"x" and store.get_blob(named_now) == b"named now"
    store.close()


def test_every_migration_has_a_postgresql_form():
    assert [m.name for m in migrations.migrations._migrations] == list(migrations.POSTGRESQL)


def test_reopening_a_migrated_database_changes_nothing(db_target):
    Store.open(db_target).close()
    store = Store.open(db_target)
    assert migrations.applied(store.db) == [m.name for m in migrations.migrations._migrations]
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


def test_blob_round_trip_property(fresh_target):
    @settings(max_examples=50, deadline=None)
    @given(st.lists(st.binary(max_size=2000), max_size=10))
    def check(blobs):
        store = Store.open(fresh_target())
        try:
            for data in blobs:
                store.put_blob(hashlib.sha256(data).digest(), data)
                store.put_blob(hashlib.sha256(data).digest(), data)
            for data in blobs:
                assert store.get_blob(hashlib.sha256(data).digest()) == data
            assert store.count("blobs") == len(set(blobs))
        finally:
            store.close()

    check()


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
    assert store.count("messages") == 1
    with pytest.raises(RuntimeEventConflict):
        store.append("c", None, [msg("different", runtime_event_id="run-request:r1")], fence_request_id="r1")


def test_messages_since_is_what_an_append_added(store):
    store.claim_run("r1", "c")
    one = store.append("c", None, [msg("a"), msg("b")], fence_request_id="r1")
    two = store.append("c", one, [msg("c"), msg("d"), msg("e")], fence_request_id="r1")
    whole = store.messages(two)
    assert store.messages_since(two, one) == whole[2:]
    assert [m.payload["text"] for m in store.messages_since(two, one)] == ["c", "d", "e"]
    assert store.messages_since(two, None) == whole
    assert store.messages_since(one, one) == []
    branch = store.append("c", one, [msg("x")], fence_request_id="r1")  # a sibling of `two`
    assert store.messages(one) + store.messages_since(branch, one) == store.messages(branch)


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


# ---- two processes on one database (two Store objects = two connections or pools) -------------------


def test_a_claim_through_another_connection_fences_the_older_run_at_its_next_write(db_target):
    replica_a, replica_b = Store.open(db_target), Store.open(db_target)
    try:
        replica_a.claim_run("old", "c")
        base = replica_a.append("c", None, [msg("a")], fence_request_id="old")
        assert replica_b.claim_run("new", "c") == "old"
        with pytest.raises(StaleRun):
            replica_a.append("c", base, [msg("late")], fence_request_id="old")
        with pytest.raises(StaleRun):
            replica_a.stage_round("round-x", "c", "old", base, {}, [(0, "call", "Read")])
        assert replica_b.append("c", base, [msg("b")], fence_request_id="new") is not None
        assert [m.payload["text"] for m in replica_a.messages(replica_a.conversation("c")["head_revision_id"])] \
            == ["a", "b"]
    finally:
        replica_a.close()
        replica_b.close()


def test_concurrent_claims_leave_exactly_one_owner(db_target):
    stores = [Store.open(db_target) for _ in range(4)]
    stores[0].claim_run("seed", "c")
    displaced = []

    def claim(i: int) -> None:
        for k in range(5):
            displaced.append(stores[i].claim_run(f"r{i}-{k}", "c"))

    errors = all_at_once(claim, len(stores))  # a deadlock or a lost update would land here
    try:
        assert errors == []
        owner = stores[0].conversation("c")["active_request_id"]
        running = stores[0].db.execute("SELECT request_id FROM runs WHERE status = 'running'").fetchall()
        assert [r[0] for r in running] == [owner]
        # every claim displaced exactly the run before it: one chain, nobody displaced twice
        assert sorted(d for d in displaced if d) == sorted({d for d in displaced if d})
        assert len(displaced) == 20 and None not in displaced
    finally:
        for s in stores:
            s.close()


def test_concurrent_completions_of_one_round_get_distinct_sequence_numbers(db_target):
    stores = [Store.open(db_target) for _ in range(3)]
    store = stores[0]
    store.claim_run("r", "c")
    base = store.append("c", None, [msg("q")], fence_request_id="r")
    store.stage_round("round", "c", "r", base, {}, [(i, f"call-{i}", "Read") for i in range(6)])

    def complete(worker: int) -> None:
        for i in range(worker, 6, 3):
            stores[worker].complete_call("round", i, "c", base, [msg(f"result {i}")],
                                         fence_request_id="r", is_error=False)

    errors = all_at_once(complete, 3)
    try:
        assert errors == []
        seqs = [r[0] for r in store.db.execute(
            "SELECT completion_seq FROM tool_round_calls WHERE round_id = 'round' ORDER BY completion_seq").fetchall()]
        assert seqs == list(range(6))
    finally:
        for s in stores:
            s.close()


def test_stores_opening_together_migrate_once(db_target):
    opened = []
    errors = all_at_once(lambda _: opened.append(Store.open(db_target)), 3)
    try:
        assert errors == []
        assert migrations.applied(opened[0].db) == [m.name for m in migrations.migrations._migrations]
    finally:
        for s in opened:
            s.close()


def test_protocol_drift_tallies_add_up(store):
    from byok.agent.drift import DriftRow

    def row(count, first, last, example):
        return DriftRow("down", "AgentServerMessage", 99, 2, "field", "1.0", count, first, last, example)

    store.record_drift([row(2, 100, 200, "req-a")])
    store.record_drift([row(3, 50, 150, "req-b"), row(1, 300, 400, "req-c")])
    [got] = store.db.execute(
        "SELECT count, first_seen_ms, last_seen_ms, example_request_id FROM protocol_drift").fetchall()
    assert tuple(got) == (6, 50, 400, "req-c")


def test_queued_inputs_keep_arrival_order_and_their_fate(store):
    assert store.queue_input("c", "user-message:a", "r1", b"first", 10) == "queued"
    assert store.queue_input("c", "inj-b", "r1", b"second", 11) == "queued"
    assert store.queue_input("c", "user-message:a", "r1", b"first, edited", 12) == "queued"  # still waiting
    rows = store.queued_inputs("c")
    assert [(r["injection_id"], r["action"], r["status"]) for r in rows] == [
        ("user-message:a", b"first, edited", "queued"), ("inj-b", b"second", "queued")]
    revision = store.append("c", None, [msg("x")])
    store.mark_inputs("c", ["user-message:a"], "delivered", revision)
    store.mark_inputs("c", ["inj-b"], "cancelled")
    assert store.queue_input("c", "inj-b", "r2", b"again", 13) == "cancelled"  # never revived
    assert [(r["injection_id"], r["revision_id"]) for r in store.queued_inputs("c")] == [("user-message:a", revision)]
    assert store.queued_inputs("c", ("queued",)) == [] and store.queued_inputs("other") == []


# ---- users (the team server) --------------------------------------------------------------------------


def test_a_conversation_belongs_to_the_user_who_began_it(store):
    from byok.store import ConversationOfAnotherUser

    store.claim_run("a1", "c", user_id="alice")
    base = store.append("c", None, [msg("alice's secret")], fence_request_id="a1")
    with pytest.raises(ConversationOfAnotherUser):
        store.claim_run("b1", "c", user_id="bob")
    with pytest.raises(ConversationOfAnotherUser):
        store.claim_run("n1", "c")  # nor the unauthenticated single user
    assert store.run("b1") is None and store.conversation("c")["active_request_id"] == "a1"
    assert store.append("c", base, [msg("more")], fence_request_id="a1") is not None  # alice's run untouched
    assert store.run("a1")["user_id"] == "alice" and store.conversation("c")["user_id"] == "alice"
    assert store.claim_run("a2", "c", user_id="alice") == "a1"


def test_blobs_are_shared_by_hash_but_read_per_user(store):
    secret, common = b"alice's history", b"the same bytes"
    store.put_blob(blob_id(secret), secret, user_id="alice")
    store.put_blob(blob_id(common), common, user_id="alice")
    assert store.put_blob(blob_id(common), common, user_id="bob") is False  # stored once
    assert store.get_blob(blob_id(secret), user_id="alice") == secret
    assert store.get_blob(blob_id(secret), user_id="bob") is None
    assert store.get_blobs([blob_id(secret), blob_id(common)], user_id="bob") == {blob_id(common): common}
    assert store.get_blob(blob_id(secret)) == secret  # no user: the single-user store sees everything
    assert store.count("blobs") == 2


def test_usage_since_sums_one_users_calls_per_model(store):
    store.clock_ms = lambda: 5_000
    for rid, user in (("r-a", "alice"), ("r-b", "bob")):
        store.claim_run(rid, f"c-{rid}", user_id=user, model_public_id="m1")
        for i in range(2):
            call = store.begin_llm_call({"request_id": rid, "conversation_id": f"c-{rid}", "call_index": i,
                                         "model_public_id": "m1", "started_at": "2030-01-01T00:00:00Z"})
            store.finish_llm_call(call, {"status": "ok", "input_tokens": 100, "output_tokens": 10,
                                         "cache_read_tokens": None})
    assert store.usage_since("alice", 0) == {
        ("m1", None): {"input": 200, "output": 20, "cache_read": 0, "cache_write": 0}}
    assert store.usage_since("alice", 6_000) == {}
    assert store.usage_since("carol", 0) == {}


# ---- replicas ----------------------------------------------------------------------------------------


def test_a_run_records_its_replica(store):
    store.claim_run("r1", "c", replica="proxy-a")
    assert store.run_replica("r1") == "proxy-a" and store.run_replica("nope") is None


def test_a_displacing_claim_notifies_the_fence_channel_when_it_commits(pg_url):
    import asyncio

    from byok.store.fence import FenceListener

    async def scenario():
        heard = []
        listener = FenceListener(pg_url, lambda fenced, by: heard.append((fenced, by)))
        listener.start()
        await asyncio.wait_for(listener.listening.wait(), 10)
        store = await asyncio.to_thread(Store.open, pg_url)
        try:
            await asyncio.to_thread(store.claim_run, "old", "c-fence")
            await asyncio.to_thread(store.claim_run, "new", "c-fence")
            await until(lambda: heard, "the fence notification")
        finally:
            await listener.stop()
            await asyncio.to_thread(store.close)
        return heard

    assert asyncio.run(scenario()) == [("old", "new")]


def test_a_subagent_is_bound_to_the_call_that_launched_it(store):
    from byok.store import SubagentConflict, SubagentLaunch

    launch = SubagentLaunch("parent", "call_a", "parent", "explore", readonly=True, depth=1)
    store.record_subagent_launch(launch)
    assert store.bind_subagent("child-1", "call_a", "parent", "explore") == launch
    assert store.bind_subagent("child-1", "call_a", None, "explore") == launch  # again: the same binding
    assert store.subagent_of_call("parent", "call_a").child_conversation_id == "child-1"
    assert store.subagent_of_call("parent", "call_b") is None and store.subagent_of_call("other", "call_a") is None
    with pytest.raises(SubagentConflict):  # a second child for one call
        store.bind_subagent("child-2", "call_a", "parent", "explore")
    store.record_subagent_launch(SubagentLaunch("parent", "call_b", "parent", "explore", False, 1))
    with pytest.raises(SubagentConflict):  # a call that does not resume it
        store.bind_subagent("child-1", "call_b", "parent", "explore")
    assert store.bind_subagent("child-9", "call_z", None, "explore") is None  # no parent here launched it
    assert store.head_messages("child-1") == []
    store.append("child-1", None, [msg("task")])
    assert [m.payload["text"] for m in store.head_messages("child-1")] == ["task"]


def test_a_subagent_without_a_group_binds_only_to_an_unambiguous_launch(store):
    from byok.store import SubagentConflict, SubagentLaunch

    first = SubagentLaunch("parent-1", "call_a", "parent-1", "explore", False, 1)
    store.record_subagent_launch(first)
    store.record_subagent_launch(SubagentLaunch("parent-2", "call_a", "parent-2", "explore", True, 1))
    with pytest.raises(SubagentConflict, match="parent-1, parent-2"):  # two conversations used that call id
        store.bind_subagent("child-1", "call_a", None, "explore")
    assert store.subagent_of_call("parent-1", "call_a") is None and store.subagent_of_call("parent-2", "call_a") is None
    assert store.bind_subagent("child-1", "call_a", "parent-1", "explore") == first  # its group tells them apart
    assert store.bind_subagent("child-1", "call_a", None, "explore") == first  # bound already: no doubt left


def test_a_resumed_subagent_is_bound_again_under_the_new_call(store):
    from byok.store import SubagentLaunch

    store.record_subagent_launch(SubagentLaunch("parent", "call_a", "parent", "generalPurpose", False, 1))
    store.bind_subagent("child-1", "call_a", "parent", "generalPurpose")
    assert store.subagent_of_call("parent", "call_a").base_revision_id is None  # a new conversation
    head = store.append("child-1", None, [msg("task")])
    resume = SubagentLaunch("parent", "call_b", "parent", "generalPurpose", True, 1, resume_agent_id="child-1")
    store.record_subagent_launch(resume)
    assert store.bind_subagent("child-1", "call_b", "parent", "generalPurpose") == resume
    assert store.subagent_of_call("parent", "call_b") == SubagentBinding("child-1", head)
    assert store.subagent_of_call("parent", "call_a").child_conversation_id == "child-1"


def test_a_subagent_of_a_call_id_two_conversations_share_binds_by_its_group(store):
    from byok.store import SubagentLaunch

    one = SubagentLaunch("conv-1", "call_x", "conv-1", "explore", True, 1)
    two = SubagentLaunch("conv-2", "call_x", "conv-2", "explore", False, 1)
    store.record_subagent_launch(one)
    store.record_subagent_launch(two)
    assert store.bind_subagent("child-1", "call_x", "conv-1", "explore") == one
    assert store.bind_subagent("child-2", "call_x", "conv-2", "explore") == two
    assert store.subagent_of_call("conv-2", "call_x").child_conversation_id == "child-2"
