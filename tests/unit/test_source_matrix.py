"""The fast matrix path (``recommender.sources.matrix``) against plain JSON decoding of the same answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.sources.grid import GridRange
from recommender.sources.matrix import DecodedSeries, decode_series
from recommender.sources.samples import parse_matrix


def _value_text(v: float) -> str:
    """A float as Prometheus writes a sample value (Go's strconv.FormatFloat 'f', -1: "NaN", "+Inf")."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


values = st.lists(st.tuples(st.floats(0, 2e9), st.floats(allow_nan=True, allow_infinity=True)), max_size=30)
labels = st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=4)


@given(st.lists(st.tuples(labels, values), max_size=5), st.sampled_from([None, 1]))
def test_fast_and_json_paths_give_the_same_series(items: list[tuple[dict[str, str], list[tuple[float, float]]]],
                                                  indent: int | None) -> None:
    result = [{"metric": m, "values": [[t, _value_text(v)] for t, v in pairs]} for m, pairs in items]
    text = json.dumps(result, indent=indent)
    i, fast = 1, []
    for _ in result:
        decoded = decode_series(text, i)
        assert decoded is not None
        item, i = decoded
        fast.append(item)
        i = len(text) - len(text[i:].lstrip(" \n,"))
    for got, want in zip(parse_matrix(fast), parse_matrix(result), strict=True):
        assert got.labels == want.labels
        assert got.labels == want.labels
        assert np.array_equal(got.timestamps_s, want.timestamps_s)
        assert np.array_equal(got.values, want.values, equal_nan=True)


@pytest.mark.parametrize("item", [
    '{"metric":{"pod":"a"},"values":[[1,"2"]],"histograms":[[1,{"count":"1"}]]}',  # native histograms too
    '{"values":[[1,"2"]],"metric":{"pod":"a"}}',  # keys in another order
    '{"metric":{"pod":"a"},"values":[[1,"2","3"]]}',  # three elements in a pair
    '{"metric":{"pod":"a"},"values":[[1,"x"]]}',  # not a number
    '{"metric":{"pod":"a"},"values":[[1,{"v":"2"}]]}',  # an object
    '{"metric":{"pod":"a"},"values":[[[1,"2"]]]}',  # nested too deep
    '{"metric":{"pod":"a"},"values":[[1,"2"]]',  # cut short
])
def test_anything_but_the_plain_shape_goes_to_the_json_path(item: str) -> None:
    assert decode_series(item, 0) is None


def test_a_plain_item_with_odd_spacing_and_empty_values() -> None:
    text = ' { "metric" : {"pod": "a]]"} , "values" : [ [ 1 , "0.5" ] , [2,"+Inf"] ] } ,'
    item, end = decode_series(text, 0) or (None, 0)
    assert isinstance(item, DecodedSeries) and item.metric == {"pod": "a]]"}
    times = item.timestamps()
    assert times is not None and times.tolist() == [1.0, 2.0] and item.values.tolist() == [0.5, math.inf]
    assert item.timestamps(1.0, 2.0, 2) is None  # the grid's own times: the caller shares the grid's array
    assert item.timestamps(1.0, 3.0, 2) is not None and item.timestamps(1.0, 2.0, 3) is not None
    assert end == len(' { "metric" : {"pod": "a]]"} , "values" : [ [ 1 , "0.5" ] , [2,"+Inf"] ] }')
    empty, _ = decode_series('{"metric":{},"values":[]}', 0) or (None, 0)
    times = empty.timestamps() if isinstance(empty, DecodedSeries) else None
    assert isinstance(empty, DecodedSeries) and empty.values.size == 0 and times is not None and times.size == 0


def test_a_series_on_the_grid_shares_the_grids_times_and_a_bad_time_elsewhere_is_an_error() -> None:
    grid = GridRange(first_s=300.0, last_s=900.0, step_s=300.0)
    on_grid = '{"metric":{"pod":"a"},"values":[[300,"1"],[600,"2"],[900,"3"]]}'
    gap = '{"metric":{"pod":"b"},"values":[[300,"1"],[900,"3"]]}'
    items = [decode_series(t, 0) for t in (on_grid, gap)]
    series = parse_matrix([d[0] for d in items if d is not None], grid)
    assert len(series) == 2 and not series[0].timestamps_s.flags.writeable  # the grid's read-only array
    assert series[0].timestamps_s.tolist() == [300.0, 600.0, 900.0] and series[1].timestamps_s.tolist() == [300, 900]
    bad = decode_series('{"metric":{"pod":"c"},"values":[[3e,"1"]]}', 0)
    assert bad is not None  # number characters only: taken, and its time read when asked for
    with pytest.raises(ValueError, match="malformed sample"):
        parse_matrix([bad[0]], grid)
