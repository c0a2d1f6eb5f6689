"""What every request passes: its `Host` (the dashboard's own address or an allowed one),
the token (when the dashboard has one), the `Origin` and CSRF checks of every action, the
read-only refusal, and the security headers of every response.

* Host: a request whose `Host` is not the dashboard's is refused (400, before anything is
  read): that is what a DNS-rebinding page's requests look like (taskq/dashboard/hosts.py).
* Token: a script sends `Authorization: Bearer TOKEN`; a browser signs in once at `/login`
  and then carries a cookie holding an HMAC of the token (never the token itself).
* Origin: every mutating request (POST, PUT, PATCH, DELETE) must carry the `Origin` of the
  dashboard's own page; none, `null` or another is refused (403). Browsers send it on every
  POST, and a page cannot forge it.
* CSRF: a token the dashboard signed (taskq/dashboard/csrf.py), in a `SameSite=Strict`
  cookie, repeated by every form (hidden field `csrf`) or `fetch` (header `X-CSRF-Token`):
  a page of another site can neither read the cookie nor send the matching value ("double
  submit"), and a cookie it plants is not one the dashboard signed. Requests authenticated
  by the `Authorization` header need neither Origin nor CSRF token: browsers never add that
  header on their own.
* Headers: a Content-Security-Policy allowing only this origin's own script and styles (no
  inline script at all: even markup that slipped through escaping could not run), no
  framing, no referrer to other sites, no caching of pages.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskq.dashboard.config import DashboardConfig, DashboardError
from taskq.dashboard.csrf import CsrfTokens
from taskq.dashboard.hosts import HostRule, parse_allowed
from taskq.dashboard.render import json_response, page, wants_json

CSRF_COOKIE = "taskq_csrf"
AUTH_COOKIE = "taskq_auth"
CSRF_HEADER = "x-csrf-token"
OPEN_PATHS = ("/static/", "/login")  # served without the token: no data in them
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # not "no-referrer": with it Chromium sends `Origin: null` on the pages' own forms, and
    # an action without its page's Origin is refused
    "referrer-policy": "same-origin",
}


def session_value(token: str) -> str:
    """The sign-in cookie's value: proof of the token that does not reveal it."""
    return hmac.new(token.encode(), b"taskq-dashboard-session", hashlib.sha256).hexdigest()


class Gate:
    """ASGI middleware: the Host check, sign-in when a token is set, the Origin check of
    every mutating request, the CSRF cookie, security headers."""

    def __init__(self, app: ASGIApp, config: DashboardConfig) -> None:
        self.app = app
        self.token = config.token
        self.hosts = HostRule(config.host, parse_allowed(config.allowed_hosts))
        self.csrf = CsrfTokens(config.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        local = scope.get("server")
        refusal = self.hosts.host_refusal(request.headers.get("host"), local)
        if refusal:  # nothing of this dashboard is shown to a name that is not its own
            await PlainTextResponse(refusal, 400)(scope, receive, _with_headers(send, ""))
            return
        sent = request.cookies.get(CSRF_COOKIE, "")
        csrf = sent if self.csrf.issued(sent) else self.csrf.issue()
        scope.setdefault("state", {})["csrf"] = csrf
        scope["state"]["bearer"] = bearer = self._bearer(request)
        wrapped = _with_headers(send, "" if csrf == sent else _cookie(CSRF_COOKIE, csrf))
        refusal = ""
        if request.method in MUTATING and not bearer:
            origin = request.headers.get("origin")
            refusal = self.hosts.origin_refusal(origin, request.url.scheme, local)
        if refusal:
            await refuse(request, DashboardError(403, refusal))(scope, receive, wrapped)
        elif self.token and not self._signed_in(request):
            await _sign_in_first(request)(scope, receive, wrapped)
        else:
            await self.app(scope, receive, wrapped)

    def _bearer(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        token = self.token or ""
        return bool(token) and scheme.lower() == "bearer" and _same(value, token)

    def _signed_in(self, request: Request) -> bool:
        if request.url.path.startswith(OPEN_PATHS) or request.scope["state"]["bearer"]:
            return True
        return _same(request.cookies.get(AUTH_COOKIE, ""), session_value(self.token or ""))


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def _cookie(name: str, value: str) -> str:
    """A session cookie no script can read and no other site's request carries."""
    return f"{name}={value}; Path=/; HttpOnly; SameSite=Strict"


def _with_headers(send: Send, cookie: str) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in HEADERS.items():
                headers.setdefault(name, value)
            headers.setdefault("cache-control", "no-store")
            if cookie:
                headers.append("set-cookie", cookie)
        await send(message)

    return sending


def _sign_in_first(request: Request) -> Response:
    """401: JSON for scripts and live updates, the sign-in form for people."""
    if wants_json(request) or request.url.path.startswith("/events/"):
        response = json_response({"error": "this dashboard needs its token"}, status=401)
    else:
        response = page(
            request, "login.html", status=401, next=_local(request.url.path), wrong=False
        )
    response.headers["www-authenticate"] = "Bearer"
    return response


async def read_form(request: Request) -> dict[str, str]:
    """A POST's URL-encoded form (the only kind the pages send; no uploads), one value
    per field."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    body = await request.body()
    if body and kind != "application/x-www-form-urlencoded":
        raise DashboardError(415, "send the form as application/x-www-form-urlencoded")
    fields = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return dict(fields)


async def checked_form(request: Request, *, acting: bool = True) -> dict[str, str]:
    """The form of a POST that passed the checks every action must pass (its Host and
    Origin were checked by the Gate): the CSRF token, one this dashboard issued, and (for
    an `acting` request, anything but signing in) not read-only."""
    config: DashboardConfig = request.app.state.config
    if acting and config.read_only:
        raise DashboardError(403, "this dashboard is read-only (--read-only): nothing was done")
    form = await read_form(request)
    if request.scope["state"]["bearer"]:
        return form
    given = request.headers.get(CSRF_HEADER) or form.get("csrf")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    issued = cookie == request.scope["state"]["csrf"]  # the Gate kept it: it signed it
    if not isinstance(given, str) or not issued or not _same(given, cookie):
        raise DashboardError(403, "refused: the CSRF token is missing or wrong; reload the page")
    return form


async def login(request: Request) -> Response:
    """POST /login: a correct token sets the sign-in cookie and goes on to `next`."""
    config: DashboardConfig = request.app.state.config
    form = await checked_form(request, acting=False)
    target = _local(str(form.get("next") or "/"))
    token = form.get("token")
    if not config.token or not isinstance(token, str) or not _same(token, config.token):
        return page(request, "login.html", status=401, next=target, wrong=True)
    response = RedirectResponse(target, status_code=303)
    response.headers.append("set-cookie", _cookie(AUTH_COOKIE, session_value(config.token)))
    return response


async def login_form(request: Request) -> Response:
    """GET /login: the sign-in form."""
    target = _local(request.query_params.get("next", "/"))
    return page(request, "login.html", next=target, wrong=False)


def _local(target: str) -> str:
    """Only paths of this site are followed after signing in (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def refuse(request: Request, error: DashboardError) -> Response:
    """The answer to a DashboardError: JSON `{"error"}` or the error page."""
    if wants_json(request):
        return json_response({"error": error.message}, status=error.status)
    return page(request, "error.html", status=error.status, message=error.message, see=error.see)
