"""Where a build's history starts: which partitions it reads from the earliest, when their history is cut, and
what the refusal and the status say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.errors import ConfigurationError
from projections.history import ACCEPT_FLAG, HistoryStart, earliest_partitions
from projections.settings import load_settings
from projections.status import history_line

pytestmark = pytest.mark.unit

PARTITIONS = {"outbox.event.order": [0, 1, 2]}


@pytest.mark.parametrize(
    ("starting_offsets", "expected"),
    [
        ("earliest", PARTITIONS),
        ("latest", {}),
        ('{"outbox.event.order":{"0":42,"1":-2,"2":-1}}', {"outbox.event.order": [1]}),
        # A partition the JSON leaves out starts at the earliest offset too (Spark's rule).
        ('{"outbox.event.order":{"0":42}}', {"outbox.event.order": [1, 2]}),
        ('{"outbox.event.order":{"0":4,"1":5,"2":6}}', {}),
    ],
)
def test_the_partitions_a_source_starts_at_their_earliest_offset(starting_offsets: str,
                                                                  expected: dict[str, list[int]]) -> None:
    assert earliest_partitions(starting_offsets, PARTITIONS) == expected


def test_a_history_from_offset_0_everywhere_is_complete() -> None:
    history = HistoryStart("earliest", {"t": {"0": 0, "1": 0}})
    assert history.complete and history.cut == {}
    assert not HistoryStart("latest").complete
    assert not HistoryStart(json.dumps({"t": {"0": 5, "1": -2}}), {"t": {"1": 0}}).complete


def test_a_cut_history_names_each_partition_and_the_first_offset_kept_in_the_refusal() -> None:
    history = HistoryStart("earliest", {"t": {"0": 17, "1": 0, "2": 4}},
                           first_kept={"t": {"0": "2026-11-20T10:00:00+00:00"}})
    assert history.cut == {"t": {"0": 17, "2": 4}} and not history.complete
    refusal = history.refusal("orders_current", "a replay into a new table")
    assert "t partition 0 from offset 17 (first kept event at 2026-11-20T10:00:00+00:00)" in refusal
    assert "t partition 2 from offset 4" in refusal and "t partition 1" not in refusal
    assert "Nothing changed" in refusal and ACCEPT_FLAG in refusal
    record = HistoryStart("earliest", {"t": {"0": 17}}, accepted=True).as_record()
    assert record["accepted_truncated"] is True and record["deleted_before"] == {"t": {"0": 17}}


def test_status_says_where_the_history_starts_in_one_line() -> None:
    assert history_line(None).startswith("not noted")
    assert history_line(HistoryStart("earliest", {"t": {"0": 0}}).as_record()).startswith("complete")
    cut = history_line(HistoryStart("earliest", {"t": {"0": 17}}, accepted=True).as_record())
    assert "cut by retention: t[0] from offset 17" in cut and ACCEPT_FLAG in cut
    assert "only what followed" in history_line(HistoryStart("latest").as_record())


def test_accepting_a_cut_history_is_a_flag_only_never_a_standing_setting(tmp_path: Path) -> None:
    assert load_settings(flags={"accept_truncated_history": True}, env={}).accept_truncated_history
    assert not load_settings(env={"PROJECTIONS_ACCEPT_TRUNCATED_HISTORY": "true"}).accept_truncated_history
    toml = tmp_path / "p.toml"
    toml.write_text("accept_truncated_history = true\n")
    with pytest.raises(ConfigurationError, match="unknown settings"):
        load_settings(toml_path=toml, env={})
