"""TLS with client certificates on a real server: a worker and a producer connect with the
CA, cert and key settings and run a task; a client without a certificate, or one that does
not trust the server's CA, gets a clear taskq error at connect instead of a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from taskq import App, ConnectError, TaskqError
from taskq.server import EmbeddedServer
from tests.conftest import finishes, run_cli, run_one_task


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class TlsServer:
    server: EmbeddedServer
    client: Pki


def write_pki(root: Path) -> tuple[Pki, Pki]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    ca = trustme.CA()
    pairs = {"server": ca.issue_cert("127.0.0.1", "localhost"), "client": ca.issue_cert("worker")}
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    made = []
    for who, issued in pairs.items():
        issued.cert_chain_pems[0].write_to_path(str(root / f"{who}-cert.pem"))
        issued.private_key_pem.write_to_path(str(root / f"{who}-key.pem"))
        made.append(Pki(root / "ca.pem", root / f"{who}-cert.pem", root / f"{who}-key.pem"))
    return made[0], made[1]


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    root = tmp_path_factory.mktemp("tls")
    server_pki, client_pki = write_pki(root)
    config = root / "server.conf"
    config.write_text(
        f'jetstream {{ store_dir: "{root / "store"}" }}\n'
        "tls {\n"
        f'  cert_file: "{server_pki.cert}"\n'
        f'  key_file: "{server_pki.key}"\n'
        f'  ca_file: "{server_pki.ca}"\n'
        "  verify: true\n"  # mutual TLS: clients must present a certificate from the CA
        "  timeout: 2\n"
        "}\n"
    )
    server = EmbeddedServer(store_dir=root / "store", config=str(config), log_file=root / "log")
    server.start()
    yield TlsServer(server, client_pki)
    server.stop()


def tls_app(tls: TlsServer, **overrides: str | None) -> App:
    settings: dict[str, str | None] = {
        "tls_ca": str(tls.client.ca),
        "tls_cert": str(tls.client.cert),
        "tls_key": str(tls.client.key),
    }
    settings.update(overrides)
    prefix = "tls" + str(int(time.time() * 1000) % 10**8)
    return App(url=tls.server.url, prefix=prefix, connect_timeout=2.0, **settings)


async def test_worker_and_producer_run_a_task_over_mutual_tls(tls_server: TlsServer) -> None:
    await run_one_task(tls_app(tls_server))


@pytest.mark.parametrize(
    "missing",
    [
        {"tls_cert": None, "tls_key": None},  # no client certificate: the server refuses
        {"tls_ca": None, "tls_cert": None, "tls_key": None},  # plain text to a TLS server
    ],
    ids=["no-client-cert", "no-tls"],
)
async def test_a_client_without_the_right_tls_settings_is_refused_clearly(
    tls_server: TlsServer, missing: dict[str, None]
) -> None:
    app = tls_app(tls_server, **missing)
    with pytest.raises(TaskqError) as info:
        await finishes(app.client(), "a refused TLS connect")  # a refusal must not hang
    assert isinstance(info.value, ConnectError), info.value
    assert tls_server.server.url.removeprefix("nats://") in str(info.value)


async def test_a_client_that_does_not_trust_the_server_ca_is_refused(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    other_ca = trustme.CA()
    other_ca.cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    app = tls_app(tls_server, tls_ca=str(tmp_path / "other-ca.pem"))
    with pytest.raises(ConnectError) as info:
        await app.client()
    assert "certificate" in str(info.value).lower(), info.value


def test_cli_takes_the_tls_flags(tls_server: TlsServer) -> None:
    url, pki = tls_server.server.url, tls_server.client
    flags = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.cert), "--tls-key", str(pki.key)]
    ok = run_cli(url, "tlscli", *flags, "queues", "--json")
    assert ok.returncode == 0, ok.stderr
    refused = run_cli(url, "tlscli", "queues")
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert "\n" not in line and "TLS with NATS at" in line, line
