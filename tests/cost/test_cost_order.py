"""The ranking orders the feasible offers a part at a time (only as far as the offers shown
need): whatever is walked is the full order's beginning, ties by offer key."""

from __future__ import annotations

from collections import namedtuple

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.cost.recommend.sweep import in_order

_Key = namedtuple("_Key", "key")


def _full_order(rows, by_time, offers):
    # cost, hours (or hours, cost), then the offer key; equal keys keep the rows' order
    figures = (lambda r: (r[1], r[0])) if by_time else (lambda r: (r[0], r[1]))
    return sorted(rows, key=lambda r: (figures(r), offers[r[2]].key))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(0, 30)),
                max_size=700),
       st.booleans(), st.integers(0, 700))
def test_walking_the_order_gives_the_full_orders_beginning(cells, by_time, walk):
    offers = [_Key(f"k{key:02d}") for _, _, key in cells]
    rows = [(float(c), float(h), i, None, None, 0.0) for i, (c, h, _) in enumerate(cells)]
    full = _full_order(rows, by_time, offers)
    assert list(in_order(list(rows), by_time, offers)) == full
    it = in_order(list(rows), by_time, offers)
    first = [row for _, row in zip(range(walk), it, strict=False)]
    assert first == full[:walk]
