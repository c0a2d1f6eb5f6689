"""The attacks of the dashboard's security review, each tried against a real dashboard (and,
where a browser decides what is sent, from a real page in Chromium): a DNS-rebinding page,
a CSRF cookie planted by another page of the same host, actions without an `Origin` or from
another one. Each is refused; the same request from the dashboard's own page still works."""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from playwright.async_api import Page, expect

from taskq import App
from taskq.operate.queue_stats import queue_stats
from tests.conftest import run_cli
from tests.dashboard.conftest import Dashboard
from tests.dashboard.http import Http

NO_ORIGIN = "refused: an action must carry the Origin of the dashboard's own page; it had none"
NULL_ORIGIN = "refused: an action must carry the Origin of the dashboard's own page; it had null"
BAD_CSRF = "refused: the CSRF token is missing or wrong; reload the page"


def port_of(board: Dashboard) -> int:
    return int(board.url.rsplit(":", 1)[1])


async def mail_queue(app: App) -> None:
    """A queue `mail` with one task waiting: something to pause."""

    @app.task(queue="mail")
    async def send() -> None: ...

    await send.enqueue()


def refused_host(reply_body: str, host: str) -> bool:
    lines = reply_body.splitlines()
    return len(lines) == 1 and lines[0].startswith(
        f"refused: Host {host} is not this dashboard's address"
    )


async def test_a_dns_rebinding_page_can_neither_read_nor_act(
    app: App, dashboard: Dashboard
) -> None:
    """Given attacker.example resolving to 127.0.0.1, its page's requests reach the dashboard
    as same-origin requests with `Host: attacker.example:PORT`: all refused, 400."""
    await mail_queue(app)
    http = dashboard.http
    rebound = f"attacker.example:{port_of(dashboard)}"
    reads = ["/", "/api/", "/queues/mail", "/api/dlq", "/login", "/static/dashboard.js"]
    reads += ["/history?task=send", "/api/history?queue=mail"]  # the history: charts, windows
    for path in [*reads, "/events/queues"]:
        reply = await http.get(path, host=rebound)
        assert reply.status == 400, (path, reply.status)
        assert refused_host(reply.body, rebound), reply.body
        assert reply.headers["content-type"].startswith("text/plain") and "mail" not in reply.body
        assert "set-cookie" not in {k.lower() for k in reply.headers}
    token = http.cookie("taskq_csrf") or ""  # a real token, got the honest way
    actions = [
        await http.post("/queues/mail/pause", host=rebound, origin=f"http://{rebound}"),
        await http.post(
            "/api/queues/mail/pause", host=rebound, origin=f"http://{rebound}", x_csrf_token=token
        ),
    ]
    assert [a.status for a in actions] == [400, 400]
    assert not (await queue_stats(app, "mail")).paused
    # the same action with the dashboard's own Host and Origin works
    assert (await http.post("/queues/mail/pause")).status == 303
    assert (await queue_stats(app, "mail")).paused


async def test_a_dashboard_on_all_addresses_answers_only_to_this_machine_s(
    start_dashboard: Callable[..., Dashboard],
) -> None:
    token = "s3cret-dashboard-token"
    board = start_dashboard("--host", "0.0.0.0", env={"TASKQ_DASHBOARD_TOKEN": token})
    port = port_of(board)
    bearer = f"Bearer {token}"
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert (await board.http.get("/api/", host=host, authorization=bearer)).status == 200
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port ^ 1}"):
        reply = await board.http.get("/api/", host=host, authorization=bearer)
        assert reply.status == 400 and refused_host(reply.body, host), (host, reply.body)
    acted = await board.http.post(
        "/api/queues/mail/pause", host=f"attacker.example:{port}", authorization=bearer
    )
    assert acted.status == 400


async def test_the_allow_list_admits_a_configured_name(
    app: App, start_dashboard: Callable[..., Dashboard], nats_url: str, prefix: str
) -> None:
    await mail_queue(app)
    board = start_dashboard(
        "--allowed-host", "dash.example", "--allowed-host", "proxy.example:8443"
    )
    port = port_of(board)
    http = board.http
    admitted = ["dash.example", f"dash.example:{port}", "DASH.example:443", "proxy.example:8443"]
    for host in [*admitted, f"127.0.0.1:{port}"]:
        assert (await http.get("/api/", host=host)).status == 200, host
    for host in ("proxy.example", "proxy.example:443", "evil.dash.example", f"evil.example:{port}"):
        assert (await http.get("/api/", host=host)).status == 400, host
    # behind a TLS proxy: the browser's Host and Origin are the proxy's name
    refused = await http.post("/queues/mail/pause", host="dash.example", origin="https://x.example")
    assert refused.status == 403 and not (await queue_stats(app, "mail")).paused
    done = await http.post("/queues/mail/pause", host="dash.example", origin="https://dash.example")
    assert done.status == 303 and (await queue_stats(app, "mail")).paused
    # the same, from the environment (space-separated)
    env = {"TASKQ_DASHBOARD_ALLOWED_HOSTS": "a.example b.example:9"}
    other = start_dashboard(env=env)
    for host in ("a.example:1", "b.example:9"):
        assert (await other.http.get("/api/", host=host)).status == 200, host
    assert (await other.http.get("/api/", host="b.example:10")).status == 400
    bad = run_cli(nats_url, prefix, "dashboard", "--port", "0", "--allowed-host", "a/b", timeout=30)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "taskq dashboard: --allowed-host 'a/b' is not a host name or IP address "
        "with an optional :PORT"
    )


async def test_a_csrf_cookie_the_dashboard_did_not_issue_is_refused(
    app: App, dashboard: Dashboard, start_dashboard: Callable[..., Dashboard]
) -> None:
    """Another page of the same host (any port: browsers share a host's cookies across
    ports) can plant `taskq_csrf` and repeat it in its form: the dashboard signs its own."""
    await mail_queue(app)
    fresh = Http(dashboard.url)  # no cookie of its own
    origin = dashboard.url
    other = start_dashboard()  # another dashboard signs with another secret
    await other.http.get("/")
    foreign = other.http.cookie("taskq_csrf") or ""
    for planted in (secrets.token_urlsafe(32), "x" * 64, foreign):
        cookie = f"taskq_csrf={planted}"
        form = await fresh.send(
            "POST", "/queues/mail/pause", {"csrf": planted}, cookie=cookie, origin=origin
        )
        api = await fresh.send(
            "POST", "/api/queues/mail/pause", {}, cookie=cookie, origin=origin, x_csrf_token=planted
        )
        assert (form.status, api.status) == (403, 403), planted
        assert api.json() == {"error": BAD_CSRF}
        # the refusal replaces the planted cookie with one the dashboard issued
        issued = form.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        assert issued != planted and len(issued) >= 32
    assert not (await queue_stats(app, "mail")).paused
    assert (await dashboard.http.post("/queues/mail/pause")).status == 303  # its own works


async def test_an_action_without_origin_or_with_origin_null_is_refused(
    app: App, dashboard: Dashboard, start_dashboard: Callable[..., Dashboard]
) -> None:
    await mail_queue(app)
    http = dashboard.http
    await http.get("/")
    token = http.cookie("taskq_csrf") or ""
    refusals = [
        await http.post("/queues/mail/pause", origin=None),
        await http.post("/queues/mail/pause", origin="null"),
        await http.post("/api/queues/mail/pause", origin=None, x_csrf_token=token),
        await http.post("/api/queues/mail/pause", origin="null", x_csrf_token=token),
    ]
    assert [r.status for r in refusals] == [403] * 4
    assert NO_ORIGIN in unescape(refusals[0].body) and NULL_ORIGIN in unescape(refusals[1].body)
    assert [refusals[2].json(), refusals[3].json()] == [
        {"error": NO_ORIGIN},
        {"error": NULL_ORIGIN},
    ]
    for method in ("PUT", "PATCH", "DELETE"):  # every mutating method, routed or not
        reply = await http.send(method, "/api/queues/mail/pause", {}, x_csrf_token=token)
        assert reply.status == 403 and reply.json() == {"error": NO_ORIGIN}, method
    assert not (await queue_stats(app, "mail")).paused
    # a script with the dashboard's token needs neither Origin nor CSRF token
    board = start_dashboard("--token", "s3cret")
    script = Http(board.url)
    done = await script.send("POST", "/api/queues/mail/pause", {}, authorization="Bearer s3cret")
    assert done.status == 200 and done.json()["paused"] is True


async def test_an_action_from_another_origin_is_refused(app: App, dashboard: Dashboard) -> None:
    await mail_queue(app)
    port = port_of(dashboard)
    others = [
        "http://evil.example",
        f"http://localhost:{port ^ 1}",
        f"http://127.0.0.1:{port}.evil.example",
        f"https://127.0.0.1:{port}",  # another scheme is another origin
        f"ftp://127.0.0.1:{port}",
        "http://127.0.0.1",
    ]
    for origin in others:
        reply = await dashboard.http.post("/queues/mail/pause", origin=origin)
        assert reply.status == 403, (origin, reply.status)
        assert f"refused: a request from another site ({origin})" in reply.body
    assert not (await queue_stats(app, "mail")).paused
    # the dashboard's own origin, by any of its loopback names
    assert (
        await dashboard.http.post("/queues/mail/pause", origin=f"http://localhost:{port}")
    ).status == 303


ATTACK = """<!doctype html><meta name="referrer" content="{policy}"><title>Cats</title>
<form method="post" action="{target}"><input type="hidden" name="csrf" value="{planted}">
<button>See the cats</button></form>
<script>document.cookie = "taskq_csrf={planted}; path=/";</script>
"""


@contextlib.contextmanager
def another_site(html: str) -> Iterator[str]:
    """A page served from another port of this machine: another origin, but the same
    host for cookies."""
    body = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None: ...

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_page_of_another_origin_cannot_act_in_chromium(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    """Given a page on another port of localhost that plants a CSRF cookie and posts a form
    repeating it to the dashboard (with `no-referrer`, Chromium sends `Origin: null`), when
    the user clicks its button, nothing is done."""
    await mail_queue(app)
    target = f"http://localhost:{port_of(dashboard)}/queues/mail/pause"
    planted = secrets.token_urlsafe(32)
    expected = {"no-referrer": NULL_ORIGIN, "strict-origin-when-cross-origin": "another site"}
    for policy, reason in expected.items():
        with another_site(ATTACK.format(policy=policy, target=target, planted=planted)) as url:
            await page.goto(url)
            async with page.expect_navigation():
                await page.get_by_role("button", name="See the cats").click()
            await expect(page.locator("body")).to_contain_text(reason)
        assert not (await queue_stats(app, "mail")).paused, policy
