"""The progress record only moves forward and survives a JSON round trip."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from projections.lake import Lake
from projections.progress import BatchStats, Progress, read_progress, write_progress

pytestmark = pytest.mark.unit


def stats(offsets: dict[str, dict[str, int]], max_seq: int | None, last: str | None) -> BatchStats:
    return BatchStats(
        offsets, rows=5, applied=4, quarantined=1, ignored=0, min_seq=1, max_seq=max_seq, last_event_time=last
    )


def test_positions_only_move_forward() -> None:
    start = Progress(projection="p", kind="latest_state", table="/lake/p")
    first = start.advanced(0, stats({"t": {"0": 10, "1": 4}}, 40, "2024-05-01T12:00:40.000000Z"))
    # A replay from earliest reports older positions; the record keeps the newest ones.
    replayed = first.advanced(0, stats({"t": {"0": 3, "2": 1}}, 12, "2024-05-01T12:00:12.000000Z"))
    assert replayed.offsets == {"t": {"0": 10, "1": 4, "2": 1}}
    assert (replayed.max_seq, replayed.last_event_time) == (40, "2024-05-01T12:00:40.000000Z")
    assert replayed.last_batch == {"rows": 5, "applied": 4, "quarantined": 1, "ignored": 0, "beyond_horizon": 0}


def test_a_batch_without_valid_events_keeps_seq_and_time() -> None:
    first = Progress("p", "event_log", "/t").advanced(
        3, stats({"t": {"0": 1}}, 7, "2024-01-01T00:00:00.000000Z")
    )
    after = first.advanced(4, stats({"t": {"0": 2}}, None, None))
    assert (after.batch_id, after.max_seq, after.last_event_time, after.offsets) == (
        4,
        7,
        "2024-01-01T00:00:00.000000Z",
        {"t": {"0": 2}},
    )


def test_round_trip_through_the_lake(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    assert read_progress(lake, "p") is None
    record = Progress("p", "fold", "/t").advanced(
        1, stats({"t": {"0": 3}}, 9, None), now=datetime(2024, 5, 1, tzinfo=UTC)
    )
    write_progress(lake, record)
    assert read_progress(lake, "p") == record
    assert (tmp_path / "_progress" / "p.json").is_file()


def test_a_record_created_with_its_history_keeps_the_oldest_event_time_applied() -> None:
    history = {"complete": False, "deleted_before": {"t": {"0": 17}}}
    start = Progress("p", "event_log", "/t", history=history)
    first = start.advanced(0, dataclasses.replace(stats({"t": {"0": 30}}, 40, "2024-05-01T12:00:40.000000Z"),
                                                  first_event_time="2024-05-01T12:00:17.000000Z"))
    # A later batch of newer events (or one without a valid event) leaves the oldest where it was.
    later = first.advanced(1, dataclasses.replace(stats({"t": {"0": 40}}, 50, "2024-05-01T12:00:50.000000Z"),
                                                  first_event_time="2024-05-01T12:00:41.000000Z"))
    empty = later.advanced(2, stats({"t": {"0": 41}}, None, None))
    assert empty.oldest_event_time == "2024-05-01T12:00:17.000000Z" and empty.history == history


def test_a_record_from_before_histories_were_noted_claims_no_oldest_event() -> None:
    # Its table may hold events older than any batch applied from now on.
    legacy = Progress.from_json('{"projection": "p", "kind": "fold", "table": "/t", "batch_id": 7}')
    after = legacy.advanced(8, dataclasses.replace(stats({"t": {"0": 3}}, 9, "2024-05-01T12:00:09.000000Z"),
                                                   first_event_time="2024-05-01T12:00:02.000000Z"))
    assert after.history is None and after.oldest_event_time is None
