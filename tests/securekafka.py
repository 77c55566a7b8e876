"""The secured local Kafka cluster of the tests (`ops/localstack.py kafka-up --secure`), from the client side.

SASL_SSL with SCRAM-SHA-512, a CA made for the run, ACLs required for everything. The admin super user makes
per-test users and ACLs through the admin API (`bridge.kafka.acls`), so each test's bridge and projection
run as their own least-privileged principals.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bridge.kafka.acls import apply_bindings, upsert_scram_users

MECHANISM = "SCRAM-SHA-512"


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key:
            values[key] = value
    return values


@dataclass(frozen=True)
class User:
    name: str
    password: str

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


@dataclass
class SecureKafka:
    """Bootstrap, CA and the admin user of the secured cluster; makes users and grants ACLs."""

    bootstrap: str
    ca: Path
    admin_user: User
    name: str = "ksecure"

    def conf(self, user: User | None = None, **more: Any) -> dict[str, Any]:
        """librdkafka settings for `user` (the admin by default)."""
        user = user or self.admin_user
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                "sasl.username": user.name, "sasl.password": user.password, "ssl.ca.location": str(self.ca),
                **more}

    def env(self, user: User | None = None) -> dict[str, str]:
        """The bridge's and projections' environment variables for `user` (the admin by default)."""
        user = user or self.admin_user
        return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KAFKA_SASL_MECHANISM": MECHANISM, "KAFKA_SASL_USERNAME": user.name,
                "KAFKA_SASL_PASSWORD": user.password, "KAFKA_SSL_CA_LOCATION": str(self.ca)}

    def admin(self) -> AdminClient:
        return AdminClient(self.conf())

    def new_user(self, prefix: str) -> User:
        """A new SCRAM user with a random password and no ACL yet."""
        user = User(f"{prefix}-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(24))
        upsert_scram_users(self.admin(), {user.name: user.password})
        return user

    def grant(self, bindings: Sequence[Any]) -> None:
        apply_bindings(self.admin(), bindings)
