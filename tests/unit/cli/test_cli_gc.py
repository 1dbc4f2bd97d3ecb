"""`cursor-byok gc` deletes only unreferenced, old blobs."""

from byok.cli import main
from byok.store import BlobRef, Store, blob_id


def test_gc_sweeps_unreferenced_old_blobs(db_target, capsys):
    db = db_target
    store = Store.open(db)
    store.clock_ms = lambda: 1_000  # long ago
    kept, child, orphan = b"root", b"child", b"orphan"
    store.put_blob(blob_id(child), child)
    store.put_blob(blob_id(kept), kept, [BlobRef("turns", 0, blob_id(child))])
    store.put_blob(blob_id(orphan), orphan)
    store.record_published("c", "digest", None, [blob_id(kept)])
    store.close()
    assert main(["gc", "--db", str(db), "--days", "1"]) == 0
    assert "1 deleted" in capsys.readouterr().out
    store = Store.open(db)
    assert store.get_blob(blob_id(orphan)) is None
    assert store.get_blob(blob_id(kept)) == kept and store.get_blob(blob_id(child)) == child
    store.close()


def test_gc_without_a_database_is_a_clear_error(tmp_path, capsys):
    assert main(["gc", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no database" in capsys.readouterr().err


def test_gc_on_an_unreachable_server_is_a_clear_error(pg_server, capsys):
    url = pg_server.url("no_such_database")
    assert main(["gc", "--db", url]) == 2
    err = capsys.readouterr().err
    assert "cannot reach PostgreSQL" in err and "no_such_database" in err
