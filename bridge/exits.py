"""The exit codes of `outbox-bridge`, in one table: the commands, `status`, the daemon and Kafka's refusals
all return these, and `outbox-bridge --help` lists them from here.

Every code from 2 to 10 names a cause that waiting cannot fix, so nothing retries it: the daemon exits with the
same code on every restart until someone fixes the cause, and a supervisor should not restart it in a loop.
11 is the exception: another instance leads, and this one, started again, stands by.
Several causes share 2 on purpose: each is a setting or a database to put right before starting again, and
the message says which.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
#: Anything else that went wrong; the message says what.
EXIT_ERROR: Final = 1
#: Bad usage or configuration, including an outbox that is not migrated (`outbox-bridge migrate`), a damaged
#: seq path (see `bridge.store.invariants`) and TLS to the database that fails verification.
EXIT_USAGE: Final = 2
#: The daemon halted on a poison event (`BRIDGE_POISON_POLICY=halt`).
EXIT_POISON: Final = 3
#: A topic's settings would allow acknowledged writes to be lost.
EXIT_UNSAFE: Final = 4
#: An operator's request was refused before anything changed.
EXIT_REFUSED: Final = 5
#: The database refused the login (wrong password, unknown user); see `bridge.errors.DatabaseLoginError`.
EXIT_DB_LOGIN: Final = 6
#: Kafka refused the credentials (wrong password or unknown user; SCRAM does not say which).
EXIT_AUTHENTICATION: Final = 7
#: The brokers' TLS certificate is not signed by a CA the bridge trusts.
EXIT_CERTIFICATE: Final = 8
#: An ACL is missing for what the bridge asked of Kafka.
EXIT_DENIED: Final = 9
#: Rows this bridge name has not published are gone, or the name is retired or new on an outbox whose early
#: rows are gone: see `bridge.daemon.history`.
EXIT_ROWS_GONE: Final = 10
#: Exactly-once delivery: another instance took the lease and its producer fenced this one's, so the broker aborts
#: what this one had queued. Not a fault to fix: started again, the process stands by (a supervisor restarts it).
EXIT_FENCED: Final = 11

#: Each code with what it means to an operator, in order: what `outbox-bridge --help` says.
MEANINGS: Final = (
    (EXIT_OK, "ok"),
    (EXIT_ERROR, "error"),
    (EXIT_USAGE, "bad usage or configuration (a database that is not migrated, a damaged seq path, or TLS to it "
                 "that fails verification, included)"),
    (EXIT_POISON, "halted on a poison event"),
    (EXIT_UNSAFE, "unsafe topic"),
    (EXIT_REFUSED, "request refused (nothing changed)"),
    (EXIT_DB_LOGIN, "the database refused the login (wrong password or unknown user: fix OUTBOX_DB_URL or the "
                    "role, then start again; not retried)"),
    (EXIT_AUTHENTICATION, "Kafka refused the credentials (wrong password or unknown user; not retried)"),
    (EXIT_CERTIFICATE, "Kafka's TLS certificate is not trusted (not retried)"),
    (EXIT_DENIED, "Kafka denied an operation: an ACL is missing (not retried)"),
    (EXIT_ROWS_GONE, "rows this bridge name has not published were deleted, or the name is retired or new on an "
                     "outbox whose early rows are gone (start it with `run --start-from`)"),
    (EXIT_FENCED, "fenced: another instance leads this bridge name in exactly-once delivery and the broker aborted "
                  "what this one had queued (start it again: it stands by)"),
)


def described() -> str:
    """The table as one sentence, for a command's help."""
    return "Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in MEANINGS) + "."
