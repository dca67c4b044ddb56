"""Fuzzed trace files: corrupt bytes, bad metadata, extreme values. Every reader either reads the
file or refuses it with BadInput (one line); never another exception, never a hang.

Bounded: a fixed number of examples per property, a deadline per example, a timeout per test.
"""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmreplay.errors import BadInput
from llmreplay.trace_format import METADATA_KEY, TraceMeta
from llmreplay.trace_io import iter_trace_batches, read_meta, read_trace, write_trace
from llmreplay.trace_shape import describe_trace
from tests.llmreplay.test_trace_io import good_table, record, write_raw

EXAMPLE_TIMEOUT_S = 10  # a hang is a failure, not a slow test
FUZZ = settings(
    max_examples=60,
    deadline=None,  # the alarm below bounds each example; hypothesis' deadline would flake on a busy box
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@contextmanager
def time_bound(seconds: int):
    def expired(signum, frame):
        raise TimeoutError(f"reader took more than {seconds}s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_everything(path) -> None:
    """Every reader the stages use, each to the end; only BadInput may escape."""
    with time_bound(EXAMPLE_TIMEOUT_S):
        for reader in (_whole, _streamed, _meta):
            try:
                reader(path)
            except BadInput as exc:
                message = str(exc)
                assert message and "\n" not in message, message


def _whole(path) -> None:
    describe_trace(read_trace(path).table)  # what `inspect` prints


def _streamed(path) -> None:
    _, batches = iter_trace_batches(path, batch_size=2)
    for batch in batches:
        batch.to_pylist()


def _meta(path) -> None:
    read_meta(path)


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "good.parquet"
    write_trace(path, [record(i, session_id="s", turn_index=i, think_time_ns=i * 10**6) for i in range(40)],
                TraceMeta(source="fuzz"))  # fmt: skip
    return path


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data())
def test_corrupt_bytes_are_refused_in_one_line(tmp_path, good_file, data):
    raw = bytearray(good_file.read_bytes())
    for _ in range(data.draw(st.integers(1, 12), label="flips")):
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw[at] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[: data.draw(st.integers(0, len(raw)), label="length")]
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(bytes(raw))
    read_everything(path)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
META_FIELDS = ("source", "block_size", "tokenizer", "content", "anonymized", "time_zone", "clock_domain",
               "relative_time", "format_version", "creator", "creator_version", "extra")  # fmt: skip


@pytest.mark.timeout(300)
@FUZZ
@given(
    base=st.dictionaries(st.sampled_from(META_FIELDS), JSON_VALUES, max_size=6),
    whole=st.one_of(st.none(), JSON_VALUES),
    garbage=st.one_of(st.none(), st.binary(max_size=20)),
)
def test_bad_metadata_is_refused_in_one_line(tmp_path, base, whole, garbage):
    if garbage is not None:
        raw = garbage
    elif whole is not None:
        raw = json.dumps(whole).encode()
    else:
        raw = json.dumps({"source": "fuzz", **base}).encode()
    path = tmp_path / "meta.parquet"
    pq.write_table(good_table(3).replace_schema_metadata({METADATA_KEY: raw}), path)
    read_everything(path)


INT64 = st.integers(-(2**63), 2**63 - 1)
EXTREMES = {
    "think_time_ns": INT64,
    "ttft_ns": INT64,
    "e2e_ns": INT64,
    "ttfb_ns": INT64,
    "retry_after_ms": INT64,
    "seed": INT64,
    "arrival_time": INT64,
    "prompt_tokens": st.integers(-(2**31), 2**31 - 1),
    "turn_index": st.integers(-(2**31), 2**31 - 1),
}


@pytest.mark.timeout(300)
@FUZZ
@given(
    column=st.sampled_from(sorted(EXTREMES)),
    data=st.data(),
    offsets=st.lists(INT64, max_size=3),
)
def test_extreme_values_are_read_or_refused_in_one_line(tmp_path, column, data, offsets):
    table = good_table(3)
    values = [data.draw(EXTREMES[column], label=column) for _ in range(3)]
    if column == "arrival_time":
        values.sort()
        array = pa.array(values, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    else:
        array = pa.array(values, pa.int64()).cast(table.schema.field(column).type, safe=False)
    table = table.set_column(table.schema.get_field_index(column), column, array)
    index = table.schema.get_field_index("chunk_offsets_ns")
    table = table.set_column(index, "chunk_offsets_ns", pa.array([offsets, None, []], pa.list_(pa.int64())))
    path = tmp_path / "values.parquet"
    write_raw(path, table)
    read_everything(path)


def test_a_garbage_file_in_a_trace_directory_is_named(tmp_path):
    trace = tmp_path / "trace"
    write_trace(trace / "a.parquet", [record(0)], TraceMeta(source="t"))
    (trace / "b.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(BadInput, match=r"b\.parquet: not a Parquet file"):
        read_trace(trace)


@pytest.mark.timeout(300)
@FUZZ
@given(
    arrivals_us=st.lists(st.integers(0, 2**53), min_size=1, max_size=4),
    think_ns=st.lists(st.one_of(st.none(), st.integers(0, 2**53)), min_size=4, max_size=4),
    prompt_tokens=st.lists(st.integers(0, 2**31 - 1), min_size=4, max_size=4),
    speed=st.floats(1e-3, 1e3),
)
def test_any_readable_trace_is_planned_or_refused_in_one_line(
    tmp_path, arrivals_us, think_ns, prompt_tokens, speed
):
    """What the readers accept, replay planning either plans in bounded time or refuses (one line)."""
    from replayer.config import ScheduleConfig
    from replayer.plan.bounds import check_prompt_sizes, check_span
    from replayer.plan.schedule import build_schedule, schedule_input
    from replayer.plan.trace_rows import read_trace_rows

    records = [
        record(i, arrival_time=at, session_id="s", turn_index=i, think_time_ns=think_ns[i] if i else None,
               prompt_tokens=prompt_tokens[i])
        for i, at in enumerate(sorted(arrivals_us))
    ]  # fmt: skip
    path = tmp_path / "plan.parquet"
    write_trace(path, records, TraceMeta(source="fuzz"))
    with time_bound(EXAMPLE_TIMEOUT_S):
        try:
            rows = read_trace_rows(path)
            plans = build_schedule(schedule_input(rows.table), ScheduleConfig(speed=speed))
            check_span(plans, None, str(path))
            check_prompt_sizes(rows.table, plans.record_index, str(path))
        except BadInput as exc:
            assert "\n" not in str(exc)
