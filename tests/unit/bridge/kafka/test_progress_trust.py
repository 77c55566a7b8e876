"""Kafka's progress is trusted only for the outbox it was written from: the event it names must be at its seq."""

from __future__ import annotations

import logging

import pytest

from bridge.kafka.progress import Progress, parse_progress, progress_value, trusted

pytestmark = pytest.mark.unit

OUTBOX = {1: "e-1", 2: "e-2", 5: "e-5"}


def test_a_progress_record_names_its_seq_and_event_and_reads_back() -> None:
    assert parse_progress(progress_value(5, "e-5")) == Progress(5, "e-5")
    assert parse_progress(progress_value(3)) == Progress(3, None)
    assert parse_progress(b"42") == Progress(42, None), "the decimal text of earlier records"


def test_progress_naming_this_outboxs_event_at_its_seq_is_trusted() -> None:
    assert trusted(Progress(5, "e-5"), OUTBOX.get) == 5
    assert trusted(None, OUTBOX.get) is None


@pytest.mark.parametrize("progress", [
    Progress(5, "another-outbox-5"),  # the same name on a new database: another event at that seq
    Progress(9, "e-9"),  # a restored database that never reached seq 9
    Progress(5, None),  # a rewind's mark names no event: never ahead of the watermark it was written for
], ids=["another event at the seq", "no row at the seq", "no event named"])
def test_progress_the_outbox_cannot_confirm_is_not_trusted_and_says_so(
        progress: Progress, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bridge.kafka.progress"):
        assert trusted(progress, OUTBOX.get) is None
    assert any("resuming from the database's watermark" in r.getMessage() for r in caplog.records)
