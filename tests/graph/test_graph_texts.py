"""TextColumn reads and writes like the list of texts it stands for, whatever mix of writes built it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.graph._ops._texts import TextColumn

_text = st.text(max_size=6)
_write = st.one_of(
    st.tuples(st.just("append"), _text),
    st.tuples(st.just("extend"), st.lists(_text, max_size=4)),
    st.tuples(st.just("arrow"), st.lists(_text, max_size=4)),
    st.tuples(st.just("set"), st.integers(-20, 20), _text),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_write, max_size=25))
def test_a_text_column_equals_the_list_it_stands_for(writes: list[tuple]) -> None:
    column, reference = TextColumn(), []
    for write in writes:
        if write[0] == "append":
            column.append(write[1])
            reference.append(write[1])
        elif write[0] == "extend":
            column.extend(write[1])
            reference.extend(write[1])
        elif write[0] == "arrow":
            column.extend_arrow(pa.chunked_array([pa.array(write[1], pa.string())], pa.string()))
            reference.extend(write[1])
        elif reference and -len(reference) <= write[1] < len(reference):
            column[write[1]] = write[2]
            reference[write[1]] = write[2]
    assert len(column) == len(reference)
    assert [column[i] for i in range(len(reference))] == reference
    assert [column[i - len(reference)] for i in range(len(reference))] == reference
    assert list(column) == reference and column == reference and column[1:3] == reference[1:3]
    assert column.to_arrow().to_pylist() == reference
    assert column.to_arrow().type == pa.large_string()
    with pytest.raises(IndexError):
        column[len(reference)]
