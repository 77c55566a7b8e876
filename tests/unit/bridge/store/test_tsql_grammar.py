"""Every T-SQL statement the project sends to SQL Server parses with a T-SQL grammar (sqlfluff's `tsql`
dialect), each as the statement it starts as. No SQL Server runs here, so without this a typo in a migration,
a query or a grant would first fail on a user's server.

Parsing alone is not enough: sqlfluff reads words it cannot place at the end of a statement as a second
statement, a bare procedure call (`SELECT a FROM t junk more` is a SELECT with alias `junk`, then a call of
`more`). So every statement sqlfluff finds, nested ones too, must be of a kind we send and start with that
kind's keyword, and a statement executed on its own must be exactly one statement.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Final

import pytest
from sqlfluff.core import FluffConfig, Linter

from tests.tsql_statements import Emitted, every_statement

pytestmark = pytest.mark.unit

#: The kinds of statement we send, as sqlfluff's tsql dialect names them, and how each must start.
_STARTS: Final = {
    "select_statement": "SELECT",
    "insert_statement": "INSERT",
    "update_statement": "UPDATE",
    "delete_statement": "DELETE",
    "create_table_statement": "CREATE TABLE",
    "create_index_statement": "CREATE (UNIQUE )?((NON)?CLUSTERED )?INDEX",
    "create_trigger": "CREATE TRIGGER",
    "create_role_statement": "CREATE ROLE",
    "alter_table_statement": "ALTER TABLE",
    "alter_table_switch_statement": "ALTER TABLE",
    "alter_database_statement": "ALTER DATABASE",
    "drop_table_statement": "DROP TABLE",
    "drop_index_statement": "DROP INDEX",
    "drop_sequence_statement": "DROP SEQUENCE",
    "drop_trigger": "DROP TRIGGER",
    "grant_statement": "GRANT",
    "revoke_statement": "REVOKE",
    "execute_script_statement": "EXEC(UTE)?",
    "declare_segment": "DECLARE",
    "set_segment": "SET",
    "if_then_statement": "IF",
    "begin_end_block": "BEGIN",
    "return_segment": "RETURN",
    "dbcc_statement": "DBCC",
    "transaction_statement": "(BEGIN|COMMIT|ROLLBACK|SAVE)( TRAN(SACTION)?)?",
}

#: Statements that are valid T-SQL but that sqlfluff's grammar does not know, each with why we are sure. Such a
#: batch must fail to parse exactly as described (when a sqlfluff upgrade accepts it, drop it from here).
GRAMMAR_GAPS: Final = {
    re.compile(r"ALTER TABLE \w+ SET \(LOCK_ESCALATION = (AUTO|TABLE|DISABLE)\);?"):
        "sqlfluff's tsql ALTER TABLE ... SET (...) knows FILESTREAM_ON, SYSTEM_VERSIONING and DATA_DELETION only; "
        "SET (LOCK_ESCALATION = { AUTO | TABLE | DISABLE }) is documented T-SQL since SQL Server 2008",
}


@functools.cache
def _linter() -> Linter:
    return Linter(config=FluffConfig(overrides={"dialect": "tsql", "templater": "raw"}))


def problems(sql: str, *, batch: bool) -> list[str]:
    """What keeps `sql` from being what we mean to send: unparsable parts, statements of a kind we never send
    or that do not start as their kind does, more than one statement where one is executed."""
    return _checked(sql, batch)[0]


def _checked(sql: str, batch: bool) -> tuple[list[str], int]:
    """`problems`, and how many statements sqlfluff found at the top level."""
    parsed = _linter().parse_string(sql)
    tree = parsed.parsed_variants[0].tree if parsed.parsed_variants else None
    if tree is None:
        return [f"unparsable: {'; '.join(violation.desc() for violation in parsed.violations)}"], 0
    found = [f"unparsable: {violation.desc()}" for violation in parsed.parsed_variants[0].lexing_violations]
    found += [f"unparsable: {' '.join(part.raw.split())[:160]!r}" for part in tree.recursive_crawl("unparsable")]
    statements = list(tree.recursive_crawl("statement"))
    for statement in statements:
        parts = [s for s in statement.segments if not (s.is_meta or s.is_whitespace or s.is_comment)]
        kind = parts[0].get_type() if len(parts) == 1 else f"{len(parts)} parts"
        text = " ".join(statement.raw.split())
        start = _STARTS.get(kind)
        if start is None:
            found.append(f"a statement of a kind we never send ({kind}): {text[:160]!r}")
        elif not re.match(rf"(?i){start}\b", text):
            found.append(f"a {kind} that does not start with {start}: {text[:160]!r}")
    top_level = [s for batch_ in tree.recursive_crawl("batch", recurse_into=False)
                 for s in batch_.segments if s.is_type("statement")]
    if not batch and len(top_level) != 1:
        found.append(f"{len(top_level)} statements where one is executed")
    return found, len(top_level)


def _gap(emitted: Emitted) -> str | None:
    text = "\n".join(line for line in emitted.sql.splitlines() if not line.strip().startswith("--")).strip()
    return next((why for pattern, why in GRAMMAR_GAPS.items() if pattern.fullmatch(text)), None)


def test_every_statement_sent_to_sql_server_parses_as_the_statement_it_is() -> None:
    emitted = every_statement()
    failures, gaps, statements = [], [], Counter[str]()
    for unit in emitted:
        found, count = _checked(unit.sql, unit.batch)
        statements[unit.source] += count
        why = _gap(unit)
        if why is not None:
            gaps.append(unit)
            if not found or any(not p.startswith("unparsable") for p in found):
                failures.append(f"[{unit.source}] marked as a grammar gap ({why}) but parses as {found or 'fine'}:"
                                f"\n{unit.sql.strip()}")
        elif found:
            failures.append(f"[{unit.source}] " + "; ".join(found) + f"\n{unit.sql.strip()}")
    counts = Counter(unit.source for unit in emitted)
    print(f"\nT-SQL parsed with sqlfluff's tsql grammar: {sum(statements.values())} statements in {len(emitted)} "
          f"batches or single statements; {len(gaps)} batch a known grammar gap")
    for source, count in counts.items():
        print(f"  {statements[source]:4d} statements in {count:3d}  {source}")
    assert not failures, "\n\n".join(failures)
    # Every source is there, so a path that stops sending (or a collector that breaks) cannot pass unseen.
    assert set(counts) == {"migrations (upgrade)", "migrations (downgrade)", "grants --sql", "reader and horizon",
                           "start-up checks", "watermark and lease", "dead letters and retention", "writer",
                           "operator commands", "tests/dialects.py"}
    assert len(emitted) >= 150 and len(gaps) == 1


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("SELECT a FROM t junk more", "execute_script_statement that does not start with EXEC"),
        ("SELECT a FROM t WHERE", "unparsable"),
        ("UPDATE t SETT a = 1", "unparsable"),
        ("CREATE TABEL t (a INT)", "unparsable"),
        ("SELECT 1; SELECT 2", "2 statements where one is executed"),
        ("INSERT INTO t (a) VALUES (1", "unparsable"),
    ],
)
def test_a_typo_is_caught(sql: str, problem: str) -> None:
    assert any(problem in found for found in problems(sql, batch=False)), problems(sql, batch=False)


def test_sql_server_receives_numbered_parameters_not_question_marks() -> None:
    from tests.listening_sqlserver import as_sent

    assert as_sent("SELECT a FROM t WHERE b = ? AND c = '?' AND d = ? -- ?") == \
        "SELECT a FROM t WHERE b = @P1 AND c = '?' AND d = @P2 -- ?"
