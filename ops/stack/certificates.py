"""A certificate authority and server certificates made with openssl for a run (PostgreSQL's TLS).

The secured Kafka cluster makes its own CA and a PKCS12 keystore (`stack.kafka_security`); this is the plain
PEM pair a PostgreSQL server reads.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from stack.processes import StackError


def openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {result.stderr.strip()}; is openssl installed?")


def make_certificate_authority(directory: Path, name: str) -> None:
    """`ca.key` and a self-signed `ca.crt` in directory, valid for a year."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", f"/CN={name}",
            "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.crt"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    (directory / "ca.key").chmod(0o600)


def sign_server_certificate(directory: Path, stem: str, common_name: str, alt_names: list[str]) -> None:
    """`<stem>.key` and `<stem>.crt` signed by directory's CA, for the given subjectAltNames."""
    key, csr, crt = (directory / f"{stem}.{ext}" for ext in ("key", "csr", "crt"))
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}",
            "-keyout", str(key), "-out", str(csr))
    extensions = directory / f"{stem}.ext"
    extensions.write_text(f"subjectAltName = {', '.join(alt_names)}\nextendedKeyUsage = serverAuth\n"
                          "basicConstraints = critical,CA:FALSE\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"),
            "-CAcreateserial", "-days", "365", "-sha256", "-extfile", str(extensions), "-out", str(crt))
    csr.unlink()
    extensions.unlink()
