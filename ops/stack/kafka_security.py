"""The secured local Kafka cluster's pieces: TLS material, credentials, broker settings and client settings.

Everything is made per run under the cluster's home: a CA and one broker key (openssl; the broker reads a
PKCS12 keystore and trusts the CA as PEM), and random passwords for the admin super user (added at storage
format time, `--add-scram`), the controller listener (PLAIN, which KRaft controllers can check before any
metadata exists) and the role users (`BRIDGE_USER`, `PROJECTIONS_USER`; created through the admin API once
the cluster answers). The role users' ACLs come from `bridge.kafka.acls`, the same code an operator uses.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stack.places import ROOT

MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
CONTROLLER_USER = "controller"
#: Role users made for every secured stack: the bridge writes `outbox.event.*` and its dead-letter topic;
#: the projections user reads `outbox.event.*` with groups under `outbox-projection-`.
BRIDGE_USER = "outbox-bridge"
PROJECTIONS_USER = "outbox-projections"
DLQ_TOPIC = "outbox.dlq.default"
TOPIC_PREFIX = "outbox.event."
PROGRESS_TOPIC_PREFIX = "outbox.progress."
CERT_DAYS = 30


class SecurityError(RuntimeError):
    """TLS material or credentials could not be made; the message says which command failed."""


def _run(cmd: list[str], what: str) -> None:
    if shutil.which(cmd[0]) is None:
        raise SecurityError(f"{cmd[0]} is not installed (needed to {what}): `apt-get install {cmd[0]}`")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SecurityError(f"could not {what}: {' '.join(cmd[:3])} ... failed:\n{result.stderr[-2000:]}")


@dataclass(frozen=True)
class Tls:
    """The run's CA (PEM) and the brokers' keystore (PKCS12, with its password)."""

    home: Path

    @property
    def ca(self) -> Path:
        return self.home / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.home / "broker.p12"

    def make(self, keystore_password: str, host: str) -> None:
        """A new CA and a broker certificate for `host` signed by it, unless both are there already."""
        if self.ca.exists() and self.keystore.exists():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        ca_key, key, csr, cert = (self.home / n for n in ("ca.key", "broker.key", "broker.csr", "broker.pem"))
        ext = self.home / "broker.ext"
        ext.write_text(f"subjectAltName=IP:{host},DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
        _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out",
              str(self.ca), "-days", str(CERT_DAYS), "-subj", "/CN=outbox-local-ca"], "make the run's CA")
        _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
              "-subj", f"/CN={host}"], "make the broker key")
        _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(ca_key),
              "-CAcreateserial", "-out", str(cert), "-days", str(CERT_DAYS), "-extfile", str(ext)],
             "sign the broker certificate")
        _run(["openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key), "-certfile", str(self.ca),
              "-name", "broker", "-out", str(self.keystore), "-passout", f"pass:{keystore_password}"],
             "write the broker keystore")
        for path in (ca_key, key, self.keystore):
            os.chmod(path, 0o600)


@dataclass(frozen=True)
class Credentials:
    """The run's passwords, kept in `credentials.json` (mode 0600) so restarts of the same data agree."""

    admin: str
    controller: str
    keystore: str
    users: Mapping[str, str]

    @classmethod
    def load_or_make(cls, path: Path) -> Credentials:
        if path.exists():
            data = json.loads(path.read_text())
            return cls(data["admin"], data["controller"], data["keystore"], data["users"])

        def password() -> str:
            return secrets.token_urlsafe(24)

        made = cls(password(), password(), password(), {BRIDGE_USER: password(), PROJECTIONS_USER: password()})
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"admin": made.admin, "controller": made.controller, "keystore": made.keystore,
                       "users": dict(made.users)}, handle)
        return made


def _jaas(module: str, user: str, password: str, *extra: str) -> str:
    fields = " ".join([f'username="{user}"', f'password="{password}"', *extra])
    return f"{module} required {fields};"


def broker_properties(tls: Tls, creds: Credentials, client_listener: str) -> list[str]:
    """The settings that secure every listener of a node: clients and brokers on `client_listener`
    (SASL_SSL, SCRAM-SHA-512), the controller listener SASL_SSL with PLAIN; ACLs decide the rest."""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    client = client_listener.lower()
    return [
        f"listener.security.protocol.map={client_listener}:SASL_SSL,CONTROLLER:SASL_SSL",
        f"listener.name.{client}.sasl.enabled.mechanisms={MECHANISM}",
        f"listener.name.{client}.scram-sha-512.sasl.jaas.config={_jaas(scram, ADMIN_USER, creds.admin)}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        "listener.name.controller.plain.sasl.jaas.config="
        + _jaas(plain, CONTROLLER_USER, creds.controller, f'user_{CONTROLLER_USER}="{creds.controller}"'),
        f"ssl.keystore.location={tls.keystore}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.password={creds.keystore}",
        f"ssl.key.password={creds.keystore}",
        f"ssl.truststore.location={tls.ca}",
        "ssl.truststore.type=PEM",
        "ssl.endpoint.identification.algorithm=https",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        f"super.users=User:{ADMIN_USER};User:{CONTROLLER_USER}",
    ]


def scram_format_args(creds: Credentials) -> list[str]:
    """`kafka-storage format` arguments that create the admin user before the first start."""
    return ["--add-scram", f"{MECHANISM}=[name={ADMIN_USER},password={creds.admin}]"]


def admin_client_conf(bootstrap: str, tls: Tls, creds: Credentials) -> dict[str, object]:
    """librdkafka settings for the admin super user."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": ADMIN_USER,
        "sasl.password": creds.admin,
        "ssl.ca.location": str(tls.ca),
    }


def provision(bootstrap: str, tls: Tls, creds: Credentials, timeout: float = 30.0) -> None:
    """Create the role users (SCRAM) and their ACLs through the admin API, as the admin super user."""
    from confluent_kafka.admin import AdminClient

    root = str(ROOT)
    if root not in sys.path:  # run as a script: the project's own bridge package, not an installed one
        sys.path.insert(0, root)
    from confluent_kafka.admin import ResourcePatternType

    from bridge.kafka.acls import apply_bindings, bridge_bindings, projection_bindings, upsert_scram_users
    from bridge.kafka.transaction_policy import transactional_id

    admin = AdminClient(admin_client_conf(bootstrap, tls, creds))
    upsert_scram_users(admin, creds.users, timeout=timeout)
    bindings = [
        # Exactly-once delivery (BRIDGE_DELIVERY=exactly-once) for any bridge name: its transactional.id and its
        # progress topic by prefix.
        *bridge_bindings(f"User:{BRIDGE_USER}", topic_prefix=TOPIC_PREFIX, dlq_topic=DLQ_TOPIC,
                         transactional_id=transactional_id(""), progress_topic=PROGRESS_TOPIC_PREFIX,
                         exactly_once_pattern=ResourcePatternType.PREFIXED),
        *projection_bindings(f"User:{PROJECTIONS_USER}", topic_prefix=TOPIC_PREFIX,
                             group_prefix="outbox-projection-"),
    ]
    apply_bindings(admin, bindings, timeout=timeout)


def client_env(bootstrap: str, tls: Tls, creds: Credentials) -> dict[str, str]:
    """What a client needs: bootstrap, protocol, mechanism, CA, and a user and password per role."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": MECHANISM,
        "KAFKA_SSL_CA_LOCATION": str(tls.ca),
        "KAFKA_ADMIN_USERNAME": ADMIN_USER,
        "KAFKA_ADMIN_PASSWORD": creds.admin,
    }
    for user, password in creds.users.items():
        role = {BRIDGE_USER: "BRIDGE", PROJECTIONS_USER: "PROJECTIONS"}.get(user, user.upper().replace("-", "_"))
        env[f"KAFKA_{role}_USERNAME"] = user
        env[f"KAFKA_{role}_PASSWORD"] = password
    return env


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Write KEY=value lines, readable by the owner only (it holds passwords)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{key}={value}\n" for key, value in values.items()))
