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
