"""A bridge that starts while its database link fails often: the start-up checks (schema revision, the
never-skip seq path, the login's rights, the lease) make progress step by step, each retried on its own,
so the bridge leads and publishes every committed event even when one result set, one COMMIT and one
ROLLBACK in seven are cut. PostgreSQL through `tests.faultproxy`, writers committing out of seq order."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from tests.faultproxy import Cut, FaultProxy, Moment
from tests.integration.bridge.test_connection_faults import _assert_nothing_lost, _publish_while_cut

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: One in seven of every result set (cut before its first row reaches the bridge), COMMIT and ROLLBACK.
CUTS = (Cut(Moment.MID_RESULT, every=7, after_rows=0), Cut(Moment.COMMIT, every=7), Cut(Moment.ROLLBACK, every=7))


def test_a_bridge_starting_on_a_link_that_cuts_one_in_seven_leads_and_publishes_everything(
    postgres_url: str, kafka_bootstrap: str
) -> None:
    server = make_url(postgres_url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432), *CUTS) as proxy:
        run = _publish_while_cut(postgres_url, proxy.url_for(postgres_url), kafka_bootstrap)
    assert proxy.cuts[Moment.MID_RESULT] > 0 and proxy.cuts[Moment.COMMIT] + proxy.cuts[Moment.ROLLBACK] > 0
    _assert_nothing_lost(run, postgres_url, "one in seven", proxy,
                         f"; client statements {dict(proxy.statements.most_common(8))}")


def test_a_bridge_that_cannot_start_names_the_step_in_its_log_metrics_status_and_doctor(
    postgres_url: str, kafka_bootstrap: str
) -> None:
    """The seq-path check's result is cut every time; everything else on the link works. The bridge keeps
    retrying that step alone, and says which step fails, how often, since when and why; once the link is
    mended it leads, having not repeated the steps that passed."""
    from bridge.doctor import BridgeDoctor, Verdict
    from bridge.migrate import upgrade
    from bridge.status import collect_status
    from tests.support import bridge_config, start_bridge, wait_until

    upgrade(postgres_url)
    server = make_url(postgres_url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432)) as proxy:
        proxy.cut_results_naming("cache_size")  # pg_sequences, read only by the seq-path check
        config = bridge_config(proxy.url_for(postgres_url), kafka_bootstrap)
        bridge = start_bridge(config)
        try:
            registry = bridge.daemon.metrics.registry
            wait_until(lambda: (registry.get_sample_value("outbox_startup_failures_total", {"step": "seq path"})
                                or 0) >= 3, 30, "three failed attempts at the seq path")
            assert not bridge.daemon.ready
            assert registry.get_sample_value("outbox_startup_seconds") > 0
            assert registry.get_sample_value("outbox_startup_alert_after_seconds") == 300
            assert not registry.get_sample_value("outbox_startup_failures_total", {"step": "schema revision"})

            direct = bridge_config(postgres_url, kafka_bootstrap, bridge_name=config.bridge_name)
            wait_until(lambda: bool(collect_status(direct.database)["instances"]), 10, "the instance's row")
            [instance] = collect_status(direct.database)["instances"]
            assert instance["state"] == "starting" and instance["step"] == "seq path"
            assert instance["attempts"] >= 1 and instance["failing_since"] and "seq path" in instance["error"]
            [check] = [c for c in BridgeDoctor(direct).run() if c.name == "instances"]
            assert check.verdict is Verdict.WARNING and "cannot start: step 'seq path' failed" in check.summary

            proxy.cut_results_naming(None)  # the link is mended
            wait_until(lambda: bridge.daemon.ready and bridge.daemon.leadership.leading, 30, "the bridge to lead")
            assert registry.get_sample_value("outbox_startup_seconds") == 0
            assert not registry.get_sample_value("outbox_startup_failures_total", {"step": "schema revision"}), \
                "a step that passed is not run again"
            wait_until(lambda: collect_status(direct.database)["instances"][0]["state"] == "leading", 10,
                       "state leading")
        finally:
            assert bridge.stop() == 0
    assert collect_status(direct.database)["instances"] == [], "a graceful stop removes the instance's row"
