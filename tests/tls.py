"""TLS servers of a test's own: a throwaway CA and one certificate for every server (and client).

`make_certs(directory)` writes them with /usr/bin/openssl (EC keys: fast); `TLSProcess` is a
redis-server (tests/sentinel.py's `Process`) listening on TLS only (`port 0`, `tls-port`),
asking clients for a certificate signed by the CA (`tls-auth-clients yes`) and using TLS to its
replicas and cluster bus too; `ClusterSetup(..., certs=certs)` (tests/cluster.py) is a Cluster
of them. The servers' certificate is the client's too (no extended key usage: any use).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import redis

from tests.sentinel import Process


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path

    @property
    def query(self) -> str:
        """A rediss URL's query giving the CA and this client's certificate."""
        return urlencode(
            {"ssl_ca_certs": self.ca, "ssl_certfile": self.cert, "ssl_keyfile": self.key}
        )

    def client_options(self) -> dict[str, Any]:
        """redis-py's options for a TLS connection to these servers."""
        return {"ssl": True, "ssl_ca_certs": str(self.ca), "ssl_certfile": str(self.cert),
                "ssl_keyfile": str(self.key)}  # fmt: skip

    def cli_args(self) -> list[str]:
        """redis-cli's options for the same."""
        return ["--tls", "--cacert", str(self.ca), "--cert", str(self.cert), "--key", str(self.key)]

    def server_config(self) -> str:
        """redis.conf lines: TLS only, on the port Process gives ({port})."""
        return (
            "port 0\ntls-port {port}\n"
            f"tls-cert-file {self.cert}\ntls-key-file {self.key}\ntls-ca-cert-file {self.ca}\n"
            "tls-auth-clients yes\ntls-replication yes\ntls-cluster yes\n"
        )


def _openssl(*args: str | Path, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is not installed (apt-get install openssl).")
    subprocess.run([openssl, *map(str, args)], cwd=cwd, check=True, capture_output=True,
                   timeout=30)  # fmt: skip


def make_certs(directory: Path) -> Certs:
    """A CA valid for a day, and a certificate it signed for 127.0.0.1 and localhost."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=django-jobs test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _openssl("req", "-new", *ec, "-keyout", "node.key", "-out", "node.csr",
             "-subj", "/CN=localhost", cwd=directory)  # fmt: skip
    (directory / "node.ext").write_text(
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "node.crt", "-days", "1", "-extfile", "node.ext",
             cwd=directory)  # fmt: skip
    return Certs(directory / "ca.crt", directory / "node.crt", directory / "node.key")


class TLSProcess(Process):
    """A redis-server on TLS only (see the module); its client() speaks TLS."""

    def __init__(
        self, executable: str, directory: Path, config: str, port: int = 0, *, certs: Certs
    ) -> None:
        super().__init__(executable, directory, config + certs.server_config(), port)
        self.certs = certs

    def client(self, **kwargs: object) -> redis.Redis:
        options = {"socket_timeout": 2, **self.certs.client_options(), **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]
