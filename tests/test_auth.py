"""Token, NKey and creds-file (JWT, operator mode) authentication against real servers:
the right credentials run a task end to end, wrong ones are one clear PermissionDenied."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import nkeys
import pytest

from taskq import App, PermissionDenied
from taskq.server import EmbeddedServer
from tests.conftest import cli_argv, finishes, run_one_task


def new_key(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def public(key: nkeys.KeyPair) -> str:
    return str(key.public_key.decode())


def seed(key: nkeys.KeyPair) -> str:
    return str(key.seed.decode())


def jwt(claims: dict[str, object], signer: nkeys.KeyPair) -> str:
    """A NATS JWT (v2): base64url header.claims, signed ed25519 by the issuer's nkey."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    header = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = {
        "jti": uuid.uuid4().hex.upper(),
        "iat": int(time.time()),
        "iss": public(signer),
        **claims,
    }
    payload = b64(json.dumps(body).encode())
    signature = b64(signer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


def start(root: Path, config: str) -> EmbeddedServer:
    path = root / "server.conf"
    path.write_text(f'jetstream {{ store_dir: "{root / "store"}" }}\n{config}')
    return EmbeddedServer(
        store_dir=root / "store", config=str(path), log_file=root / "server.log"
    ).start()


async def runs_a_task(url: str, **credentials: str) -> None:
    await run_one_task(App(url=url, prefix="t" + uuid.uuid4().hex[:8], **credentials))


async def refused(url: str, **credentials: str) -> str:
    app = App(url=url, **credentials)
    with pytest.raises(PermissionDenied) as info:
        await finishes(app.client(), "connecting with refused credentials")
    await app.aclose()
    return str(info.value)


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    server = start(tmp_path_factory.mktemp("token"), 'authorization { token: "s3cret-t0ken" }')
    yield server
    server.stop()


async def test_token(token_server: EmbeddedServer) -> None:
    await runs_a_task(token_server.url, token="s3cret-t0ken")
    assert "refused the credentials" in await refused(token_server.url, token="wrong")


def test_token_from_the_cli_flag_and_env(token_server: EmbeddedServer) -> None:
    import subprocess

    def queues(*extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [*cli_argv(token_server.url, "tok", "queues", "--interval", "0"), *extra]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )

    assert queues(env={"TASKQ_TOKEN": "s3cret-t0ken"}).returncode == 0
    bad = queues(env={"TASKQ_TOKEN": "nope"})
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


async def test_nkey_seed(tmp_path: Path) -> None:
    user, stranger = new_key(nkeys.PREFIX_BYTE_USER), new_key(nkeys.PREFIX_BYTE_USER)
    server = start(tmp_path, f'authorization {{ users: [ {{ nkey: "{public(user)}" }} ] }}')
    try:
        await runs_a_task(server.url, nkey_seed=seed(user))
        await refused(server.url, nkey_seed=seed(stranger))
    finally:
        server.stop()


def creds_file(path: Path, user_jwt: str, user: nkeys.KeyPair) -> str:
    path.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed(user)}\n------END USER NKEY SEED------\n"
    )
    return str(path)


async def test_creds_file_in_operator_mode(tmp_path: Path) -> None:
    operator = new_key(nkeys.PREFIX_BYTE_OPERATOR)
    account, system = new_key(nkeys.PREFIX_BYTE_ACCOUNT), new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    unlimited = {
        "subs": -1,
        "data": -1,
        "payload": -1,
        "imports": -1,
        "exports": -1,
        "wildcards": True,
        "conn": -1,
        "leaf": -1,
    }
    jetstream = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}

    def account_jwt(key: nkeys.KeyPair, name: str, js: bool) -> str:
        limits = {**unlimited, **(jetstream if js else {})}
        return jwt(
            {
                "sub": public(key),
                "name": name,
                "nats": {"type": "account", "version": 2, "limits": limits},
            },
            operator,
        )

    def user_creds(name: str) -> str:
        user = new_key(nkeys.PREFIX_BYTE_USER)
        claims = {
            "sub": public(user),
            "name": name,
            "nats": {
                "type": "user",
                "version": 2,
                "pub": {},
                "sub": {},
                "subs": -1,
                "data": -1,
                "payload": -1,
            },
        }
        return creds_file(tmp_path / f"{name}.creds", jwt(claims, account), user)

    operator_jwt = jwt(
        {
            "sub": public(operator),
            "name": "taskq-test",
            "nats": {"type": "operator", "version": 2, "system_account": public(system)},
        },
        operator,
    )
    server = start(
        tmp_path,
        f"""
operator: "{operator_jwt}"
system_account: "{public(system)}"
resolver: MEMORY
resolver_preload: {{
  "{public(account)}": "{account_jwt(account, "TASKQ", True)}"
  "{public(system)}": "{account_jwt(system, "SYS", False)}"
}}
""",
    )
    try:
        await runs_a_task(server.url, creds=user_creds("worker"))
        # a user signed by an account the server does not know
        rogue_account = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
        rogue = new_key(nkeys.PREFIX_BYTE_USER)
        rogue_jwt = jwt(
            {"sub": public(rogue), "name": "rogue", "nats": {"type": "user", "version": 2}},
            rogue_account,
        )
        await refused(server.url, creds=creds_file(tmp_path / "rogue.creds", rogue_jwt, rogue))
    finally:
        server.stop()
