"""Projecting the same events gives the same tables: from scratch twice, and with every event sent three times."""

from __future__ import annotations

from projections.examples import PROJECTIONS
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import order_lifecycle


def test_same_events_twice_and_three_copies_give_identical_tables(harness: Harness) -> None:
    events = order_lifecycle(12)
    once = harness.topic(events)
    tripled = harness.topic(events, copies=3)

    first, second, duplicated = harness.lake("first"), harness.lake("second"), harness.lake("tripled")
    # Three independent builds, each from scratch into its own lake: run side by side (one wait, not three).
    harness.run_together([(PROJECTIONS, once, first), (PROJECTIONS, once, second), (PROJECTIONS, tripled, duplicated)])

    for projection in PROJECTIONS:
        reference = harness.rows(projection, first)
        assert reference, f"{projection.name} is empty"
        assert harness.rows(projection, second) == reference, projection.name
        assert harness.rows(projection, duplicated) == reference, projection.name
    # Spot checks against the events themselves, so "identical" is not "identically wrong".
    log = harness.rows(PROJECTIONS[2], duplicated)
    assert len(log) == len(events)
