import pytest
from hypothesis import given, strategies as st

from byok.wire.errors import ProtocolError
from byok.agent.inbox import Inbox


def test_in_order_delivery():
    inbox = Inbox()
    assert inbox.push(0, "a") == ["a"]
    assert inbox.push(1, "b") == ["b"]


def test_early_appends_are_held_until_the_gap_fills():
    inbox = Inbox()
    assert inbox.push(2, "c") == []
    assert inbox.push(1, "b") == []
    assert inbox.held == 2
    assert inbox.push(0, "a") == ["a", "b", "c"]


def test_duplicates_are_dropped():
    inbox = Inbox()
    inbox.push(0, "a")
    inbox.push(2, "c")
    assert inbox.push(0, "a again") == []
    assert inbox.push(2, "c again") == []
    assert inbox.duplicates == 2
    assert inbox.push(1, "b") == ["b", "c"]


def test_unbounded_holding_is_a_protocol_error():
    inbox = Inbox(max_held=2)
    inbox.push(5, "x")
    inbox.push(6, "y")
    with pytest.raises(ProtocolError):
        inbox.push(7, "z")


@given(st.permutations(list(range(30))), st.lists(st.integers(0, 29), max_size=10))
def test_any_arrival_order_delivers_each_once_in_order(order, dups):
    inbox = Inbox()
    out = []
    for i, seqno in enumerate(order):
        out += inbox.push(seqno, seqno)
        if i < len(dups):
            out += inbox.push(dups[i], dups[i])
    assert out == list(range(30))
