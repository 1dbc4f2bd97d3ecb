"""The incremental core: a conversation's projection kept warm between turns gives the same
checkpoints, byte for byte, as folding its history from the store (the cold path), over random
histories with tool rounds, compactions, subagents, imports and edits; and the warm cache keeps
within its budget, least recently used first out."""

from __future__ import annotations

import itertools

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from byok.agent.cursor import projection as proj
from byok.agent.warm import WarmCache
from byok.store import NewMessage, Store
from tests.support.histories import CHOICES, STEP, History, Steps, outcome, same, warm_against_cold

CONVERSATIONS = itertools.count()
EXAMPLES = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@EXAMPLES
@given(Steps, CHOICES)
def test_a_warm_projection_is_the_cold_one_after_every_turn(steps, choices):
    """Checkpoints of a projector extended across runs equal the whole history folded at once
    (tests/fuzz/test_fuzz_projection.py runs the same check on 10,000 histories)."""
    warm_against_cold(steps, choices)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store.open(tmp_path_factory.mktemp("incremental") / "byok.db")
    yield s
    s.close()


@EXAMPLES
@given(st.lists(st.tuples(st.lists(STEP, min_size=1, max_size=8), st.integers(0, 5)), min_size=1, max_size=6),
       st.data())
def test_runs_with_edits_keep_warm_and_cold_identical(store, runs, data):
    """Runs of one conversation through the store and the warm cache as the turn uses them: each
    run continues from the last published revision, or (an edit) from an earlier one, folds in what
    it appends, and is checked against the cold fold of the store's history when it ends."""
    cid = f"conv-{next(CONVERSATIONS)}"  # one store for every example: each its own conversation
    cache = WarmCache()
    head = {"revision": None}

    def sink(role, origin, payload, event_id):
        revision, [stored] = store.append(cid, head["revision"], [NewMessage(role, origin, payload, event_id, "r")],
                                          returning=True)
        head["revision"] = revision
        return stored

    h = History(sink=sink)
    published: list[tuple[int | None, list, list]] = [(None, [], [])]  # (revision, its messages, groups)
    for steps, back in runs:
        revision, messages, groups = published[-1 - min(back, len(published) - 1)]
        h.messages[:], h.groups[:] = messages, groups  # back > 0: an edit, from an earlier revision
        head["revision"] = revision
        projector = cache.take(cid, revision) or proj.Projector(h.blobs).extend(store.messages(revision))
        base = outcome(projector, None)  # the run's base: the client holds all it names
        held = base.blob_ids() if not isinstance(base, type) else set()
        projector.release()
        before = len(h.messages)
        h.run(steps)
        projector.extend(h.messages[before:], known=h.blobs)
        cold = proj.Projector(h.blobs).extend(store.messages(head["revision"]))
        same(outcome(projector, None), outcome(cold, None), held, h.blobs)
        cache.put(cid, head["revision"], projector)
        published.append((head["revision"], list(h.messages), list(h.groups)))
    hypothesis.note(f"warm cache: {cache.hits} hits, {cache.misses} misses")


def test_the_warm_cache_keeps_the_most_recently_used_within_its_budget():
    def projector(size: int) -> proj.Projector:
        p = proj.Projector()
        p.size = size
        return p

    cache = WarmCache(budget=100)
    a, b, c = projector(40), projector(40), projector(40)
    cache.put("a", 1, a)
    cache.put("b", 1, b)
    assert cache.take("a", 1) is a  # taken: a run owns it now
    cache.put("a", 2, a)  # given back at its new revision: the most recently used
    cache.put("c", 1, c)  # over budget: b, the least recently used, goes
    assert len(cache) == 2 and cache.size == 80 and cache.evictions == 1
    assert cache.take("b", 1) is None
    assert cache.take("a", 1) is None  # left at revision 2: any other base is the cold path
    assert cache.take("a", 2) is None  # and a take that missed dropped it
    cache.put("huge", 1, projector(101))  # larger than the whole budget: never kept
    assert cache.take("huge", 1) is None and cache.hits == 1
    assert WarmCache(budget=0).take("c", 1) is None
