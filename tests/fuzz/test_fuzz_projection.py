"""Fuzzed incremental projection: a projector kept warm across runs gives, at every checkpoint, the
same state bytes, GC roots and blobs to SET as the whole history folded at once (the cold path).

Target (FUZZ_CASES generated histories, default 10000): tool rounds in any completion order, reads,
todos, plans, Tasks, progress calls, errors, mid-run messages, background completions, user shell
commands, compactions and imported checkpoints (tests/support/histories.py).
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from tests.fuzz.test_fuzz_decoders import fuzz
from tests.support.histories import CHOICES, Steps, warm_against_cold

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(3600)]


def test_fuzz_warm_projection_equals_cold():
    fuzz("projection", st.tuples(Steps, CHOICES), lambda value: warm_against_cold(*value))
