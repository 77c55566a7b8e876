"""`outbox-bridge grants --sql`: each role gets exactly what it needs, DELETE only with retention."""

from __future__ import annotations

import pytest

from bridge.cli import main
from bridge.errors import ConfigurationError
from bridge.grants import RolePlan, render, statements


def _granted(plan: RolePlan) -> list[str]:
    return [s.sql for s in statements(plan) if s.sql.startswith("GRANT")]


def test_postgres_writer_gets_insert_and_the_seq_path_and_the_bridge_no_delete_without_retention() -> None:
    grants = _granted(RolePlan("postgresql", writer="app", bridge="relay"))
    assert "GRANT INSERT ON TABLE public.domain_events TO app" in grants
    assert "GRANT USAGE ON SEQUENCE public.domain_events_seq_seq TO app" in grants
    assert "GRANT EXECUTE ON FUNCTION public.outbox_next_seq() TO app" in grants
    assert "GRANT SELECT ON TABLE public.domain_events TO relay" in grants
    assert ("GRANT SELECT, INSERT, UPDATE ON TABLE public.bridge_offsets, public.bridge_replay_audit, "
            "public.bridge_dead_letters, public.bridge_deletions TO relay") in grants
    assert not [g for g in grants if "DELETE" in g and "domain_events" in g], "no DELETE on the outbox"
    assert len([g for g in grants if g.endswith(" app") or " app," in g]) == 4, "INSERT, the seq path, the schema"


def test_retention_adds_delete_for_the_bridge_only() -> None:
    for dialect in ("postgresql", "mssql"):
        deletes = [g for g in _granted(RolePlan(dialect, retention=True)) if "DELETE" in g and "domain_events" in g]
        assert len(deletes) == 1 and "outbox_bridge" in deletes[0]
        # Besides, only its own instance rows, which an instance removes when it stops.
        others = [g for g in _granted(RolePlan(dialect, retention=False)) if "DELETE" in g]
        assert len(others) == 1 and "bridge_instances" in others[0] and "outbox_bridge" in others[0]


def test_every_object_is_revoked_before_it_is_granted_so_reapplying_takes_delete_back() -> None:
    for dialect in ("postgresql", "mssql"):
        sql = [s.sql for s in statements(RolePlan(dialect, retention=False))]
        first_grant = next(i for i, s in enumerate(sql) if s.startswith("GRANT") and "CONNECT" not in s
                           and "SCHEMA" not in s)
        assert any((s.startswith("REVOKE") and "DELETE" in s) or "REVOKE ALL" in s for s in sql[:first_grant])


def test_sql_server_writer_relies_on_ownership_chaining_through_the_trigger() -> None:
    plan = RolePlan("mssql", schema="outbox")
    grants = _granted(plan)
    writer = [g for g in grants if g.endswith("[outbox_writer]")]
    assert writer == ["GRANT INSERT ON OBJECT::[outbox].[domain_events] TO [outbox_writer]"]
    assert "GRANT SELECT ON OBJECT::[outbox].[outbox_seq_tickets] TO [outbox_bridge]" in grants
    script = render(plan)
    assert "\nGO\n" in script and "VIEW SERVER STATE" in script


@pytest.mark.parametrize(
    ("plan", "phrase"),
    [
        (dict(dialect="sqlite"), "not 'sqlite'"),
        (dict(dialect="postgresql", writer="app; DROP TABLE x"), "--writer-role 'app; DROP TABLE x'"),
        (dict(dialect="postgresql", bridge="Relay"), "--bridge-role 'Relay'"),
        (dict(dialect="mssql", writer="same", bridge="same"), "separate roles"),
    ],
)
def test_bad_names_and_dialects_are_refused_naming_the_value(plan: dict[str, str], phrase: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        RolePlan(**plan)  # type: ignore[arg-type]
    assert phrase in str(refused.value)


def test_grants_sql_prints_the_script_for_the_dialect_of_the_url_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grants", "--sql", "--db-url", "postgresql+psycopg://nobody:secret@db.invalid/app"]) == 0
    out = capsys.readouterr().out
    assert "GRANT SELECT ON TABLE public.domain_events TO outbox_bridge;" in out
    assert "secret" not in out
    assert main(["grants", "--sql", "--db-url", "sqlite:///x.db"]) == 2
    assert main(["grants", "--sql", "--dialect", "mssql", "--retention", "--db-url", "sqlite:///x.db"]) == 0
    assert "GRANT DELETE ON OBJECT::[dbo].[domain_events] TO [outbox_bridge]" in capsys.readouterr().out
