"""`make demo` explains itself: what it starts and leaves running, and progress a pipe or a log can hold."""

from __future__ import annotations

from bridge.demo import Stage, introduction, progress_line


def test_the_introduction_says_what_starts_what_stays_running_and_how_to_stop_it() -> None:
    text = introduction(with_spark=True)
    assert "Kafka" in text and "make down" in text
    assert "bridge" in text and "Spark" in text
    assert "does not start PostgreSQL" in text
    assert "Spark" not in introduction(with_spark=False).split("It starts:")[1]


def test_a_progress_line_is_one_plain_line_naming_every_stage() -> None:
    frame = [
        Stage("events written to the outbox", "written", 1200),
        Stage("records in Kafka", "in Kafka", 1100),
        Stage("events in the Delta event log", "in Delta", None),
    ]
    line = progress_line(12.4, frame)
    assert "\n" not in line
    assert line == "[ 12 s] written 1200 | in Kafka 1100 | in Delta (Spark starting)"
