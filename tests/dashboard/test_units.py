"""Pure parts of the dashboard: when schedules fire next, where a dashboard may listen,
which Host and Origin it answers to, its CSRF tokens, what it shows of its NATS URL,
workflow ids; and `taskq demo --dashboard`."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from taskq.cron import next_fire, parse_cron
from taskq.dashboard.config import DashboardConfig, UnsafeBind, check_bind, is_loopback
from taskq.dashboard.csrf import CsrfTokens
from taskq.dashboard.hosts import HostRule, parse_allowed
from taskq.dashboard.render import bar, clock, took
from taskq.dashboard.serve import address
from taskq.errors import ConfigError
from taskq.settings import Settings
from taskq.workflows.story import workflow_id_of
from tests.conftest import ROOT, run_cli

NOW = datetime(2026, 11, 23, 21, 21, 23, 600_000, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("*/4 * * * * *", "2026-11-23 21:21:24"),
        ("0 0 3 * * *", "2026-11-24 03:00:00"),
        ("@hourly", "2026-11-23 22:00:00"),
        ("@daily", "2026-11-24 00:00:00"),
        ("0 30 9 * * MON-FRI", "2026-11-24 09:30:00"),
        ("0 0 0 29 2 *", "2028-02-29 00:00:00"),  # the next leap day
        ("0 0 12 1 * MON", "2026-11-30 12:00:00"),  # day and weekday both set: either
        ("0 0 12 * * SUN", "2026-11-29 12:00:00"),
        ("30 15 10 1 JAN *", "2027-01-01 10:15:30"),
        ("@every 3s", "2026-11-23 21:21:27"),  # whole seconds after the next second
        ("@at 2026-12-01T00:00:00Z", "2026-12-01 00:00:00"),
    ],
)
def test_next_fire(expression: str, expected: str) -> None:
    moment = next_fire(expression, NOW, NOW)
    assert moment is not None and moment.strftime("%Y-%m-%d %H:%M:%S") == expected


def test_every_counts_from_when_the_schedule_was_stored() -> None:
    # measured on nats-server 2.15.1: stored at :23.6, `@every 3s` fired at :27, :30, :33
    later = NOW.replace(second=30, microsecond=200_000)
    assert next_fire("@every 3s", NOW, later) == NOW.replace(second=33, microsecond=0)
    with pytest.raises(ConfigError):  # 31 February never comes: nats-server refuses it
        next_fire("0 0 0 31 2 *", NOW, NOW)


@pytest.mark.parametrize(
    "bad", ["* * * * *", "61 * * * * *", "*/0 * * * * *", "x * * * * *", "0 0 12 * * 7"]
)
def test_bad_cron_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_cron(bad)


def test_times_show_milliseconds_and_spans_read_apart() -> None:
    """Four attempts within a second read as four times, each with what it took."""
    assert clock("2026-11-29T16:00:01.042Z") == "2026-11-29 16:00:01.042Z"
    assert clock("2026-11-29T17:00:01.5+01:00") == "2026-11-29 16:00:01.500Z"
    assert clock(None) == clock("") == "-"
    assert took("2026-11-29T16:00:01.042Z", "2026-11-29T16:00:01.100Z") == "0.058 s"
    assert took("2026-11-29T16:00:01.000Z", "2026-11-29T16:03:13.000Z") == "3m12s"
    assert took("2026-11-29T16:00:01.000Z", None) == "-"


def test_a_step_s_bar_sits_on_its_run_s_axis() -> None:
    run = ("2026-11-29T16:00:00.000Z", "2026-11-29T16:00:10.000Z")
    assert bar("2026-11-29T16:00:02.500Z", "2026-11-29T16:00:05.000Z", *run) == (250, 250)
    assert bar("2026-11-29T16:00:09.999Z", "2026-11-29T16:00:10.000Z", *run) == (1000, 0)
    assert bar(None, None, *run) is None  # not started
    assert bar("2026-11-29T16:00:00.000Z", None, run[0], run[0]) is None  # no axis


def test_only_loopback_binds_need_no_token() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.5", "dashboard.internal"):
        assert not is_loopback(host)
        with pytest.raises(UnsafeBind, match=f"refusing to listen on {host} without a token"):
            check_bind(host, None)
        check_bind(host, "a-token")


LOOPBACK_HOSTS = ["127.0.0.1:8787", "localhost:8787", "LocalHost:8787", "[::1]:8787"]
FOREIGN = ["attacker.example:8787", "attacker.example", "user@127.0.0.1:8787", ""]


@pytest.mark.parametrize(
    ("bind", "local", "admitted", "refused"),
    [
        (
            "127.0.0.1",
            ("127.0.0.1", 8787),
            [*LOOPBACK_HOSTS, "[0:0:0:0:0:0:0:1]:8787"],
            [*FOREIGN, "127.0.0.1", "127.0.0.1:8788", "127.0.0.2:8787", "localhost.:8787"],
        ),
        ("127.0.0.2", ("127.0.0.2", 8787), ["127.0.0.2:8787", *LOOPBACK_HOSTS], FOREIGN),
        # every address: the IP literal the request arrived at (loopback names on loopback)
        ("0.0.0.0", ("192.168.1.5", 8787), ["192.168.1.5:8787"], [*FOREIGN, "127.0.0.1:8787"]),
        ("0.0.0.0", ("127.0.0.1", 8787), LOOPBACK_HOSTS, [*FOREIGN, "192.168.1.5:8787"]),
        ("::", ("::ffff:127.0.0.1", 8787), LOOPBACK_HOSTS, FOREIGN),
        ("::", ("fe80::1", 8787), ["[fe80::1]:8787"], [*FOREIGN, "localhost:8787"]),
        ("192.168.1.5", ("192.168.1.5", 80), ["192.168.1.5", "192.168.1.5:80"], ["localhost:80"]),
        ("dash.internal", ("10.1.2.3", 8787), ["dash.internal:8787"], ["10.1.2.3:8787"]),
    ],
)
def test_the_hosts_a_dashboard_answers_to(
    bind: str, local: tuple[str, int], admitted: list[str], refused: list[str]
) -> None:
    rule = HostRule(bind)
    for host in admitted:
        assert rule.host_refusal(host, local) == "", host
    for host in refused:
        assert rule.host_refusal(host, local).startswith("refused: "), host


def test_the_allow_list_adds_names_on_any_port_or_on_one() -> None:
    rule = HostRule("127.0.0.1", parse_allowed(["dash.example", "Proxy.Example:8443"]))
    local = ("127.0.0.1", 8787)
    for host in ("dash.example", "dash.example:9", "proxy.example:8443", "localhost:8787"):
        assert rule.host_refusal(host, local) == "", host
    for host in ("proxy.example", "proxy.example:443", "x.dash.example", "dash.example.evil"):
        assert rule.host_refusal(host, local) != "", host
    for bad in ("", "a/b", "u@h", "h:0", "h:65536", "h:x", "::1", "[::1", "*.example"):
        with pytest.raises(ConfigError, match="is not a host name or IP address"):
            DashboardConfig(Settings(), allowed_hosts=(bad,))


def test_an_action_s_origin_is_the_dashboard_s_own_or_an_allowed_host() -> None:
    rule = HostRule("127.0.0.1", parse_allowed(["dash.example"]))
    local = ("127.0.0.1", 8787)
    for origin in ("http://127.0.0.1:8787", "http://localhost:8787", "https://dash.example"):
        assert rule.origin_refusal(origin, "http", local) == "", origin
    assert rule.origin_refusal("https://127.0.0.1:8787", "https", local) == ""  # behind TLS
    assert rule.origin_refusal(None, "http", local).endswith("it had none")
    assert rule.origin_refusal("null", "http", local).endswith("it had null")
    for origin in ("https://127.0.0.1:8787", "http://127.0.0.1", "ftp://dash.example", "x"):
        assert "another site" in rule.origin_refusal(origin, "http", local), origin


def test_the_announced_address_is_one_the_dashboard_answers_to() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        shown = {host: address(sock, host) for host in ("0.0.0.0", "::", "[::1]", "dash.lan")}
    assert shown == {
        "0.0.0.0": f"http://127.0.0.1:{port}/",
        "::": f"http://[::1]:{port}/",
        "[::1]": f"http://[::1]:{port}/",
        "dash.lan": f"http://dash.lan:{port}/",
    }


def test_csrf_tokens_are_those_the_dashboard_signed() -> None:
    tokens = CsrfTokens(None)
    issued = tokens.issue()
    assert tokens.issued(issued) and len(issued) >= 32 and issued != tokens.issue()
    nonce, mac = issued.split(".")
    other = "B" if mac.endswith("A") else "A"  # a last character the real one is not
    for forged in ("x" * 43, f"{nonce}.{mac[:-1]}{other}", f"{nonce}x.{mac}", nonce, "", "."):
        assert not tokens.issued(forged), forged
    assert not CsrfTokens(None).issued(issued)  # another process: another random key
    # dashboards sharing a token accept each other's (behind a load balancer)
    assert CsrfTokens("t").issued(CsrfTokens("t").issue())
    assert not CsrfTokens("u").issued(CsrfTokens("t").issue())


def test_the_server_label_never_holds_credentials() -> None:
    settings = Settings(url="nats://ops:pw@10.0.0.1:4222,tls://u:p@n2:4222", prefix="shop")
    label = DashboardConfig(settings).server_label()
    assert label == "nats://10.0.0.1:4222,tls://n2:4222 (prefix shop)"


def test_workflow_ids() -> None:
    assert workflow_id_of("01ABC.3") == "01ABC"
    assert workflow_id_of("01ABC.cb") == "01ABC"
    assert workflow_id_of("01ABC") == "01ABC"
    assert workflow_id_of("order.shipping") == "order.shipping"


def test_demo_points_at_the_dashboard() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskq", "demo", "--no-spark", "--tasks", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "`taskq demo --dashboard`" in done.stdout and "http://127.0.0.1:8787/" in done.stdout


def test_a_taken_port_or_no_server_is_one_line_and_exit_1(nats_url: str, prefix: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = run_cli(nats_url, prefix, "dashboard", "--port", port, timeout=30)
    assert busy.returncode == 1
    assert busy.stderr.startswith(f"taskq: cannot listen on 127.0.0.1:{port}: ")
    assert len(busy.stderr.strip().splitlines()) == 1
    nowhere = run_cli("nats://127.0.0.1:1", prefix, "dashboard", "--port", "0", timeout=30)
    assert nowhere.returncode == 1
    assert nowhere.stderr.strip() == (
        "taskq: cannot reach NATS at nats://127.0.0.1:1: start one with `taskq server`"
    )
