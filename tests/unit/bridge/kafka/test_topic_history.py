"""How far back a topic's history goes: what `topics check` and `doctor` say about a topic that deletes or
compacts records, and which configs `topics ensure` may set (it lengthens a retention, never shortens one)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bridge.kafka.topic_history import (
    Retention,
    creation_configs,
    describe_ms,
    history_finding,
    lengthening,
    setting,
)

pytestmark = pytest.mark.unit

SEVEN_DAYS_MS = 7 * 86_400_000
FOREVER = Retention(-1, -1, "delete")


def test_a_topic_the_bridge_creates_keeps_every_record_unless_told_otherwise() -> None:
    assert creation_configs(-1) == {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
    assert creation_configs(SEVEN_DAYS_MS)["retention.ms"] == str(SEVEN_DAYS_MS)


def test_a_topic_that_keeps_every_record_has_no_finding() -> None:
    assert history_finding("t", FOREVER, -1, timedelta(days=7)) is None


def test_seven_days_of_retention_names_how_far_back_the_history_goes_and_the_fix() -> None:
    finding = history_finding("outbox.event.order", Retention(SEVEN_DAYS_MS, -1, "delete"), -1, None)
    assert finding is not None
    assert "outbox.event.order" in finding.summary and "retention.ms=604800000" in finding.summary
    assert "its history goes back 7 days" in finding.summary
    assert "gone everywhere" not in finding.summary
    assert "outbox-bridge topics ensure" in finding.fix and "retention.ms=-1,retention.bytes=-1" in finding.fix
    assert "BRIDGE_RETENTION" not in finding.fix


def test_with_outbox_retention_too_one_line_says_older_events_are_gone_everywhere_and_how_to_change_either() -> None:
    finding = history_finding("t", Retention(SEVEN_DAYS_MS, -1, "delete"), -1, timedelta(days=7))
    assert finding is not None and "\n" not in finding.summary
    assert "BRIDGE_RETENTION=7d" in finding.summary
    assert "an event older than 7 days is gone everywhere: neither in the outbox nor in Kafka" in finding.summary
    assert "unset BRIDGE_RETENTION" in finding.fix and "retention.ms=-1" in finding.fix


def test_events_are_gone_everywhere_only_past_the_longer_of_the_two() -> None:
    finding = history_finding("t", Retention(30 * 86_400_000, -1, "delete"), -1, timedelta(days=7))
    assert finding is not None and "older than 30 days is gone everywhere" in finding.summary


def test_a_size_limit_or_compaction_is_a_finite_history_too() -> None:
    by_size = history_finding("t", Retention(-1, 1 << 30, "delete"), -1, None)
    assert by_size is not None and "1 GiB per partition" in by_size.summary
    assert "does not reach the first event" in by_size.summary
    compacted = history_finding("t", Retention(-1, -1, "compact"), -1, None)
    assert compacted is not None and "only the latest record of each key" in compacted.summary
    assert "cleanup.policy=delete" in compacted.fix


def test_a_retention_chosen_by_the_setting_says_how_to_keep_everything_instead() -> None:
    finding = history_finding("t", Retention(30 * 86_400_000, -1, "delete"), 30 * 86_400_000, None)
    assert finding is not None
    assert "set BRIDGE_TOPIC_RETENTION=forever and run `outbox-bridge topics ensure`" in finding.fix


@pytest.mark.parametrize(
    ("current", "wanted_ms", "configs"),
    [
        (Retention(SEVEN_DAYS_MS, -1, "delete"), -1, {"retention.ms": "-1"}),
        (Retention(SEVEN_DAYS_MS, 1 << 30, "delete"), -1, {"retention.ms": "-1", "retention.bytes": "-1"}),
        (Retention(3_600_000, -1, "delete"), SEVEN_DAYS_MS, {"retention.ms": str(SEVEN_DAYS_MS)}),
        # Never shorter: a topic that keeps more than the setting asks is left as it is.
        (FOREVER, SEVEN_DAYS_MS, {}),
        (Retention(30 * 86_400_000, -1, "delete"), SEVEN_DAYS_MS, {}),
        # A size limit is the team's choice when the setting is finite too; compaction is never changed.
        (Retention(3_600_000, 1 << 30, "delete"), SEVEN_DAYS_MS, {"retention.ms": str(SEVEN_DAYS_MS)}),
        (Retention(-1, -1, "compact"), -1, {}),
    ],
)
def test_ensure_lengthens_a_retention_and_never_shortens_one(current: Retention, wanted_ms: int,
                                                              configs: dict[str, str]) -> None:
    assert lengthening(current, wanted_ms) == configs


@pytest.mark.parametrize(("ms", "words", "as_setting"), [
    (-1, "forever", "forever"), (SEVEN_DAYS_MS, "7 days", "7d"), (86_400_000, "1 day", "1d"),
    (5_400_000, "90 minutes", "90m"), (36 * 3_600_000, "36 hours", "36h"), (1500, "1500 ms", "1500ms"),
])
def test_retentions_read_as_words_and_as_the_settings_take_them(ms: int, words: str, as_setting: str) -> None:
    assert describe_ms(ms) == words and setting(ms) == as_setting
