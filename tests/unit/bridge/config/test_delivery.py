"""The delivery mode and the exactly-once settings: defaults, what they derive, and the refusals that name the
setting, the value and the fix."""

from __future__ import annotations

import pytest

from bridge.config import DeliveryMode, load_config
from bridge.errors import ConfigurationError

pytestmark = pytest.mark.unit

EXACTLY_ONCE = {"BRIDGE_DELIVERY": "exactly-once"}


def refusal(env: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as info:
        load_config(env=env)
    return str(info.value)


def test_at_least_once_is_the_default_and_has_no_transactions() -> None:
    config = load_config(env={})
    assert config.delivery is DeliveryMode.AT_LEAST_ONCE
    assert config.transactions is None
    assert (config.transaction_max_events, config.transaction_interval_ms) == (5000, 100)
    assert config.progress_topic_name == "outbox.progress.default"


def test_exactly_once_derives_the_transactional_id_and_progress_key_from_the_bridge_name() -> None:
    config = load_config(env={**EXACTLY_ONCE, "BRIDGE_NAME": "orders", "BRIDGE_TRANSACTION_MAX_EVENTS": "200",
                              "BRIDGE_TRANSACTION_INTERVAL_MS": "50", "BRIDGE_LEASE_TIMEOUT_S": "8"})
    policy = config.transactions
    assert policy is not None
    assert policy.transactional_id == "outbox-bridge-orders"
    assert (policy.max_events, policy.interval_s) == (200, 0.05)
    assert (policy.progress_topic, policy.progress_key) == ("outbox.progress.orders", b"orders")
    assert policy.init_timeout_s == 4.0, "fencing the previous leader stays well inside the lease"


def test_every_instance_of_a_name_shares_one_transactional_id() -> None:
    ids = {load_config(env={**EXACTLY_ONCE, "BRIDGE_NAME": "orders"}).transactions.transactional_id  # type: ignore[union-attr]
           for _ in range(2)}
    other = load_config(env={**EXACTLY_ONCE, "BRIDGE_NAME": "payments"}).transactions
    assert len(ids) == 1 and other is not None and other.transactional_id not in ids


def test_an_unknown_mode_is_refused_naming_both_modes() -> None:
    message = refusal({"BRIDGE_DELIVERY": "exactly_once"})
    assert "BRIDGE_DELIVERY='exactly_once'" in message and "at-least-once, exactly-once" in message


def test_more_events_per_transaction_than_the_in_flight_window_is_refused() -> None:
    message = refusal({**EXACTLY_ONCE, "BRIDGE_MAX_IN_FLIGHT": "100"})
    assert "BRIDGE_TRANSACTION_MAX_EVENTS=5000 is above BRIDGE_MAX_IN_FLIGHT=100" in message
    assert "lower BRIDGE_TRANSACTION_MAX_EVENTS or raise BRIDGE_MAX_IN_FLIGHT" in message


def test_the_window_check_does_not_apply_to_at_least_once() -> None:
    assert load_config(env={"BRIDGE_MAX_IN_FLIGHT": "100"}).max_in_flight == 100


def test_a_transaction_interval_at_or_above_the_delivery_timeout_is_refused() -> None:
    message = refusal({**EXACTLY_ONCE, "BRIDGE_TRANSACTION_INTERVAL_MS": "120000"})
    assert "BRIDGE_TRANSACTION_INTERVAL_MS=120000 must be below BRIDGE_DELIVERY_TIMEOUT_MS=120000" in message


def test_a_delivery_timeout_above_the_brokers_transaction_limit_is_refused_in_exactly_once() -> None:
    env = {"BRIDGE_DELIVERY_TIMEOUT_MS": "1000000"}
    assert load_config(env=env).delivery_timeout_ms == 1_000_000
    assert "transaction.max.timeout.ms" in refusal({**EXACTLY_ONCE, **env})


def test_a_transactional_id_among_the_extras_is_refused() -> None:
    message = refusal({**EXACTLY_ONCE, "BRIDGE_PRODUCER_EXTRA": '{"transactional.id": "mine"}'})
    assert "transactional.id" in message and "BRIDGE_NAME" in message and "remove it" in message


@pytest.mark.parametrize(("value", "named"), [("0", ">= 1"), ("1000001", "<= 1000000"), ("many", "an integer")])
def test_bad_transaction_sizes_name_the_setting_and_the_range(value: str, named: str) -> None:
    message = refusal({"BRIDGE_TRANSACTION_MAX_EVENTS": value})
    assert f"BRIDGE_TRANSACTION_MAX_EVENTS={value!r}" in message and named in message


def test_a_progress_topic_that_is_an_event_topic_is_refused() -> None:
    message = refusal({"BRIDGE_PROGRESS_TOPIC": "outbox.event.{bridge_name}"})
    assert "BRIDGE_PROGRESS_TOPIC renders 'outbox.event.default'" in message and "a topic of its own" in message


def test_a_progress_topic_with_an_unknown_placeholder_is_refused() -> None:
    message = refusal({"BRIDGE_PROGRESS_TOPIC": "progress.{name}"})
    assert "BRIDGE_PROGRESS_TOPIC='progress.{name}'" in message and "{bridge_name}" in message


def test_a_progress_topic_too_long_with_the_bridge_name_is_refused() -> None:
    message = refusal({"BRIDGE_PROGRESS_TOPIC": "p" * 240 + ".{bridge_name}", "BRIDGE_NAME": "n" * 20})
    assert "BRIDGE_PROGRESS_TOPIC=" in message and "Kafka refuses" in message
