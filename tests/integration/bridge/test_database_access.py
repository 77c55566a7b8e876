"""PostgreSQL over verified TLS, end to end as the least-privilege bridge role; and the failures an operator
meets first (an untrusted certificate, a wrong password, an unknown user): one clear error naming the user,
the host and the fix, a distinct exit code within seconds, never a retry loop, never the password."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bridge.migrate import upgrade
from tests.conftest import LocalPostgres
from tests.support import (
    BRIDGE_SCRIPT,
    Roles,
    bridge_config,
    bridge_env,
    insert_events,
    least_privilege_roles,
    login_url,
    read_topic,
    running,
    spawn_bridge,
    start_bridge,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

#: A refused start must end this fast: the bridge gives up at once instead of retrying.
EXIT_WITHIN_S = 30


@pytest.fixture()
def roles(local_pg_url: str) -> Iterator[Roles]:
    upgrade(local_pg_url)
    with least_privilege_roles(local_pg_url) as made:
        yield made


@pytest.fixture(scope="module")
def foreign_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the server's certificate."""
    home = tmp_path_factory.mktemp("foreign-ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=not the stack's CA", "-keyout", str(home / "ca.key"), "-out", str(home / "ca.crt")],
                   check=True, capture_output=True)
    return home / "ca.crt"


def _tls_sessions(admin_url: str, user: str) -> list[bool]:
    """Whether each open session of `user` is encrypted."""
    engine = create_engine(admin_url)
    with engine.connect() as conn:
        found = [bool(r[0]) for r in conn.execute(text(
            "SELECT s.ssl FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) WHERE a.usename = :user"
        ), {"user": user})]
    engine.dispose()
    return found


def test_the_bridge_role_publishes_everything_over_verified_tls(
    roles: Roles, local_pg: LocalPostgres, kafka_bootstrap: str
) -> None:
    writer_url, bridge_url = local_pg.tls(roles.writer_url), local_pg.tls(roles.bridge_url)
    insert_events(writer_url, 200)
    config = bridge_config(bridge_url, kafka_bootstrap)
    bridge_login = make_url(bridge_url).username
    assert bridge_login is not None
    with running(start_bridge(config)) as bridge:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 200, 60,
                   "200 events over TLS")
        sessions = _tls_sessions(roles.admin_url, bridge_login)
        insert_events(writer_url, 20, start=200)
        wait_until(lambda: bridge.daemon.tracker.watermark == 220, 60, "220 events over TLS")
        assert bridge.stop() == 0
    assert sessions and all(sessions), f"every session of the bridge is encrypted: {sessions}"
    seqs = sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order")))
    assert seqs == list(range(1, 221))


def _run_refused(url: str, kafka_bootstrap: str, tmp_path: Path) -> tuple[int, float, list[dict[str, object]], str]:
    """`outbox-bridge run` with `url`: its exit code, how long it ran, its log lines and its raw output."""
    log_path = tmp_path / f"bridge-{uuid.uuid4().hex[:6]}.log"
    env = bridge_env(url, kafka_bootstrap, f"b-{uuid.uuid4().hex[:6]}", "t.{aggregate_type}")
    started = time.monotonic()
    process = spawn_bridge(env, log_path)
    try:
        code = process.wait(EXIT_WITHIN_S)
    finally:
        process.stop_if_running()
    return code, time.monotonic() - started, process.log_lines(), log_path.read_text()


@pytest.mark.parametrize("untrusted", ["signed by another CA", "issued to another host name"])
def test_an_untrusted_server_certificate_stops_the_bridge_with_one_error_naming_host_and_fix(
    untrusted: str, roles: Roles, local_pg: LocalPostgres, kafka_bootstrap: str, foreign_ca: Path, tmp_path: Path
) -> None:
    if untrusted == "signed by another CA":
        url = make_url(local_pg.tls(roles.bridge_url, ca_file=foreign_ca))
        ca, words = foreign_ca, "certificate verify failed"
    else:
        # The stack's CA, but a host name the certificate does not carry (the address is still the server's).
        plain = make_url(roles.bridge_url)
        url = make_url(local_pg.tls(plain.set(host="db.wrong.example").update_query_dict(
            {"hostaddr": plain.host or "127.0.0.1"}).render_as_string(hide_password=False)))
        ca, words = local_pg.ca_file, 'does not match host name "db.wrong.example"'
    code, _, lines, raw = _run_refused(url.render_as_string(hide_password=False), kafka_bootstrap, tmp_path)
    assert code == 2, "a configuration error, not retried"
    errors = [line for line in lines if line.get("level") == "error"]
    assert len(errors) == 1, errors
    message = str(errors[0]["msg"])
    assert f"TLS to the database at {url.host}:{url.port} failed for user {url.username!r}" in message
    assert words in message
    assert f"sslrootcert (now {ca})" in message and "sslmode=verify-full" in message
    assert not [line for line in lines if "retry" in str(line.get("msg"))]
    assert url.password is not None and url.password not in raw


@pytest.mark.parametrize("who", ["wrong password", "unknown user"])
def test_a_refused_login_exits_6_at_once_naming_user_host_and_fix_and_never_the_password(
    who: str, roles: Roles, local_pg: LocalPostgres, kafka_bootstrap: str, tmp_path: Path
) -> None:
    real = make_url(roles.bridge_url)
    assert real.username is not None and real.password is not None
    tried = "a-wrong-pw-" + uuid.uuid4().hex[:8]
    user = real.username if who == "wrong password" else f"nobody_{uuid.uuid4().hex[:6]}"
    url = login_url(local_pg.tls(roles.bridge_url), user, tried)
    host = f"{real.host}:{real.port}"

    code, ran_s, lines, raw = _run_refused(url, kafka_bootstrap, tmp_path)
    assert code == 6
    assert ran_s < EXIT_WITHIN_S
    errors = [str(line["msg"]) for line in lines if line.get("level") == "error"]
    assert len(errors) == 1, errors
    assert f"the database at {host} refused the login of user {user!r}" in errors[0]
    assert "password authentication failed" in errors[0] and "OUTBOX_DB_URL" in errors[0]
    assert "outbox-bridge grants --sql" in errors[0]

    # Any other command says the same and exits the same way.
    status = subprocess.run([str(BRIDGE_SCRIPT), "status", "--db-url", url], capture_output=True, text=True,
                            timeout=60, env=bridge_env(url, kafka_bootstrap, "b", "t.{aggregate_type}"))
    assert status.returncode == 6
    assert f"refused the login of user {user!r}" in status.stderr

    for output in (raw, status.stdout, status.stderr):
        assert tried not in output and real.password not in output


def test_a_password_changed_under_a_running_bridge_stops_it_with_exit_6_and_nothing_lost(
    roles: Roles, local_pg: LocalPostgres, kafka_bootstrap: str
) -> None:
    insert_events(roles.writer_url, 50)
    config = bridge_config(local_pg.tls(roles.bridge_url), kafka_bootstrap)
    login = make_url(roles.bridge_url).username
    with running(start_bridge(config)) as bridge:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 50, 60,
                   "50 events")
        admin = create_engine(roles.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            # A rotation the bridge's configuration missed; its open sessions end, so it must log in again.
            conn.execute(text(f"ALTER ROLE {login} PASSWORD '{uuid.uuid4().hex}'"))
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :u"),
                         {"u": login})
        admin.dispose()
        insert_events(roles.writer_url, 10, start=50)
        bridge.thread.join(EXIT_WITHIN_S)
        assert not bridge.thread.is_alive(), "the bridge kept retrying a refused login"
        assert bridge.result == [6]
        assert "refused the login" in str(bridge.daemon.last_error)
    seqs = sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order")))
    assert seqs[:50] == list(range(1, 51)), "what was published before stays; a fixed restart resumes at the watermark"
