"""EmbeddedServer's generated config: the server really runs with the `sync_interval` and
JetStream domain asked for."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from taskq.errors import ConfigError
from taskq.server import Edge, EmbeddedServer


def _jetstream_config(server: EmbeddedServer) -> dict[str, object]:
    url = f"http://127.0.0.1:{server.port_of('monitoring')}/jsz?config=true"
    with urllib.request.urlopen(url, timeout=5) as reply:
        config: dict[str, object] = json.load(reply)["config"]
        return config


@pytest.mark.parametrize(
    ("sync", "always", "interval"),
    [
        ("always", True, None),
        ("10s", False, 10 * 10**9),
        ("2m", False, 120 * 10**9),  # unquoted in the config, nats-server read 2m as 2 MB s
        ("500ms", False, 500 * 10**6),
        (None, False, 120 * 10**9),
    ],
)
def test_the_server_runs_with_the_sync_interval_asked_for(
    tmp_path: Path, sync: str | None, always: bool, interval: int | None
) -> None:
    server = EmbeddedServer(store_dir=tmp_path / "store", sync=sync, extra_args=("-m", "-1"))
    with server:
        config = _jetstream_config(server)
        assert config.get("sync_always", False) is always
        if interval is not None:
            assert config["sync_interval"] == interval
        assert config["store_dir"] == str(tmp_path / "store" / "jetstream")
        assert server.process is not None
        generated = [Path(a) for a in server.process.args if str(a).endswith("server.conf")]
    assert len(generated) == (1 if sync else 0)
    assert not any(path.exists() for path in generated)  # removed once the server stopped


def test_bad_sync_values_are_one_line_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sync must be 'always' or a duration"):
        EmbeddedServer(store_dir=tmp_path, sync="sometimes")
    with pytest.raises(ConfigError, match="set sync_interval in the config"):
        EmbeddedServer(store_dir=tmp_path, sync="always", config=str(tmp_path / "x.conf"))


@pytest.mark.parametrize("domain", ["on", "yes", "s1"])
def test_a_site_named_like_a_boolean_is_its_domain(tmp_path: Path, domain: str) -> None:
    """`on`, `yes` are valid site names (a letter, then letters and digits): the server
    runs with that JetStream domain (unquoted, nats-server's config lexer read a boolean
    and refused to start)."""
    server = EmbeddedServer(
        store_dir=tmp_path / "store", edge=Edge(domain=domain), extra_args=("-m", "-1")
    )
    with server:
        assert _jetstream_config(server)["domain"] == domain
