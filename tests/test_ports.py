"""No port is chosen and then bound by someone else: servers bind their own ports, and the
ports a config must name ahead are leased so that no other leasing process gets them."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from taskq.ports import PortsExhausted, lease_port, port_range, release_port
from taskq.server import EmbeddedServer
from tests.cluster import Cluster
from tests.conftest import wait_until

# A process that takes ports the way a busy neighbour does: it binds port 0 and listens,
# hundreds at a time, letting the oldest go (the kernel hands out ephemeral ports).
CHURN = """
import socket, sys, time
held = []
deadline = time.monotonic() + float(sys.argv[1])
print("churning", flush=True)
while time.monotonic() < deadline:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    held.append(sock)
    if len(held) > 400:
        held.pop(0).close()
"""

# A process that leases every port it can in TASKQ_PORT_RANGE, listens on each as a server
# would, lets them all go, and starts again: one line per pass, with what it held.
HUNTER = """
import socket, sys, time
from taskq.ports import PortsExhausted, lease_port, release_port
deadline = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < deadline:
    got, socks = [], []
    while True:
        try:
            port = lease_port()
        except PortsExhausted:
            break
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        sock.listen()
        got.append(port)
        socks.append(sock)
    n += 1
    print(n, sorted(got), flush=True)
    for sock, port in zip(socks, got):
        sock.close()
        release_port(port)
"""


def _spawn(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _listener_pid(port: int) -> int | None:
    for conn in psutil.net_connections("tcp4"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
            return conn.pid
    return None


def test_servers_started_together_beside_a_port_churning_neighbour_each_bind_their_own(
    tmp_path: Path,
) -> None:
    neighbour = _spawn(CHURN, "60")
    servers = [EmbeddedServer(store_dir=tmp_path / f"s{i}") for i in range(4)]
    try:
        assert neighbour.stdout is not None and neighbour.stdout.readline() == "churning\n"
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda server: server.start(), servers))
        ports = {server.port for server in servers}
        assert len(ports) == 4
        for server in servers:
            # the port it reports is the one its own process listens on
            assert _listener_pid(server.port) == server.pid
    finally:
        neighbour.kill()
        neighbour.wait()
        for server in servers:
            server.stop()


def test_a_restarted_server_binds_the_same_port(tmp_path: Path) -> None:
    server = EmbeddedServer(store_dir=tmp_path).start()
    try:
        port, first = server.port, server.pid
        server.kill()
        server.start()
        assert server.port == port and server.pid != first
        assert _listener_pid(port) == server.pid
    finally:
        server.stop()


def _free_window(size: int) -> int:
    """The first port of `size` consecutive ports that bind right now, from a random place
    in the 10,000 ports below the lease range: the test sets TASKQ_PORT_RANGE to it, and no
    other test process leases there (inside the default range, one of them took a port of a
    window between its choice and its use)."""
    default_low, _ = port_range()
    low, high = max(1024, default_low - 10_000), default_low - 1
    start = random.randrange(low, high - 10 * size)
    while start + size - 1 <= high:
        for port in range(start, start + size):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    start = port + 1
                    break
        else:
            return start
    raise AssertionError("no free window of ports")


def test_a_leased_port_is_never_leased_by_another_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low = _free_window(8)
    monkeypatch.setenv("TASKQ_PORT_RANGE", f"{low}-{low + 7}")
    ours = [lease_port() for _ in range(5)]
    try:
        # nobody listens on ours: only the lease keeps the other process off them
        theirs = subprocess.run(
            [sys.executable, "-c", "import json\nfrom taskq.ports import lease_port, "
             "PortsExhausted\ngot = []\ntry:\n    while True:\n        got.append(lease_port())"
             "\nexcept PortsExhausted:\n    print(json.dumps(got))"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        got = json.loads(theirs.stdout)
        assert len(got) == 3 and not set(got) & set(ours)
        # its leases ended with it: the last three are ours to take, and then no more
        ours += [lease_port() for _ in range(3)]
        assert sorted(ours) == list(range(low, low + 8))
        with pytest.raises(PortsExhausted):
            lease_port()
    finally:
        for port in ours:
            release_port(port)


async def test_a_cluster_restarts_a_node_on_its_ports_while_another_process_hunts_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    low = _free_window(10)
    monkeypatch.setenv("TASKQ_PORT_RANGE", f"{low}-{low + 9}")
    cluster = Cluster(tmp_path).start()
    hunter = _spawn(HUNTER, "120")
    passes: list[list[int]] = []
    try:
        assert hunter.stdout is not None
        cluster.kill("n2")  # its two ports are free to bind, but still leased to us

        def hunted() -> bool:
            line = hunter.stdout.readline()  # type: ignore[union-attr]
            passes.append(json.loads(line.split(" ", 1)[1]))
            return len(passes) >= 3

        await wait_until(hunted, timeout=60)
        cluster.start_node("n2")
        await cluster.ready(timeout=60)
        ours = {*cluster.ports.values(), *cluster.cluster_ports.values()}
        assert all(len(got) == 4 and not set(got) & ours for got in passes), passes
        assert _listener_pid(cluster.ports["n2"]) == cluster.servers["n2"].pid
    finally:
        hunter.kill()
        hunter.wait()
        cluster.close()
