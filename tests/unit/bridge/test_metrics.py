"""The commit-to-ack histogram, kept by the daemon's thread alone, is exposed exactly as prometheus_client's
`Histogram` exposes the same observations, and the daemon feeds it once per acknowledged event."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bridge.metrics import COMMIT_TO_ACK_BUCKETS, COMMIT_TO_ACK_SECONDS, BridgeMetrics, OneThreadHistogram
from bridge.store.testing import InMemoryLeaseStore, InMemoryOutbox
from tests.unit.bridge.daemon.test_in_memory import _daemon, _script

_BOUNDS = st.sampled_from(COMMIT_TO_ACK_BUCKETS)


def _exposed(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


@given(st.lists(st.one_of(_BOUNDS, st.floats(0, 100), _BOUNDS.map(lambda b: b * (1 + 1e-12))), max_size=60))
def test_the_exposition_is_prometheus_clients_for_the_same_observations(amounts: list[float]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("h_seconds", "doc", registry=theirs, buckets=COMMIT_TO_ACK_BUCKETS)
    histogram = OneThreadHistogram("h_seconds", "doc", COMMIT_TO_ACK_BUCKETS, registry=ours)
    for amount in amounts:
        reference.observe(amount)
        histogram.observe(amount)
    assert _exposed(ours) == _exposed(theirs)


def test_the_daemon_observes_each_acknowledged_event_once() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    for _ in range(5):
        outbox.write()
    daemon = _daemon(outbox, store, delivered)
    _script(daemon, outbox, store, [])
    daemon.run()
    registry = daemon.metrics.registry
    assert len(delivered) == 5
    assert registry.get_sample_value(f"{COMMIT_TO_ACK_SECONDS}_count") == 5
    assert registry.get_sample_value(f"{COMMIT_TO_ACK_SECONDS}_bucket", {"le": "+Inf"}) == 5
    assert registry.get_sample_value(f"{COMMIT_TO_ACK_SECONDS}_sum") > 0


def test_a_registry_refuses_a_second_histogram_of_the_same_name() -> None:
    metrics = BridgeMetrics()
    try:
        OneThreadHistogram(COMMIT_TO_ACK_SECONDS, "again", COMMIT_TO_ACK_BUCKETS, registry=metrics.registry)
    except ValueError as exc:
        assert COMMIT_TO_ACK_SECONDS in str(exc)
    else:
        raise AssertionError("a duplicate name was registered")
