"""A one-pass batch takes its end offsets from the query's offset log (`projections.observed.end_offsets`)."""

from __future__ import annotations

from pathlib import Path

from projections.observed import end_offsets

# As Spark 4 writes an entry: the version, the batch's metadata, then one line per source.
ENTRY = (
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795451993531,"conf":{"spark.sql.shuffle.partitions":"2"}}\n'
    '{"orders.order":{"0":12,"1":7}}\n'
)


def test_the_end_offsets_are_the_entry_of_the_batch(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text(ENTRY)
    (tmp_path / "offsets" / "4").write_text(ENTRY.replace('"0":12', '"0":15').replace("orders", "other"))
    assert end_offsets(str(tmp_path), 3) == {"orders.order": {"0": 12, "1": 7}}
    assert end_offsets(str(tmp_path) + "/", 4) == {"other.order": {"0": 15, "1": 7}}


def test_every_source_line_counts(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(ENTRY + '{"refunds.order":{"0":3}}\n')
    assert end_offsets(str(tmp_path), 0) == {"orders.order": {"0": 12, "1": 7}, "refunds.order": {"0": 3}}


def test_no_entry_or_an_entry_not_understood_gives_none(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "1").write_text("v1\n{}\nnot json\n")
    (tmp_path / "offsets" / "2").write_text('v1\n{}\n["a list"]\n')
    assert end_offsets(str(tmp_path), 0) is None  # no entry for batch 0
    assert end_offsets(str(tmp_path), 1) is None
    assert end_offsets(str(tmp_path), 2) is None
