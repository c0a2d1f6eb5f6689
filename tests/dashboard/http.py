"""Plain HTTP to a dashboard, as a script would talk to it: cookies kept, redirects not
followed (an action answers 303), every call run off the event loop (the tests' workers
share that loop). A POST carries the dashboard's own `Origin`, as a browser's would."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Http:
    """A cookie-keeping client of one dashboard."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect()
        )

    def cookie(self, name: str) -> str | None:
        return next((c.value for c in self.jar if c.name == name), None)

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request as given (a `Host` header replaces the URL's)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers=headers or {}
        )
        try:
            with self._opener.open(req, timeout=30) as resp:
                return Reply(resp.status, dict(resp.headers), resp.read().decode())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, dict(exc.headers), exc.read().decode())

    async def get(self, path: str, **headers: str) -> Reply:
        return await asyncio.to_thread(self.request, "GET", path, None, _names(headers))

    async def post(
        self, path: str, form: dict[str, str] | None = None, **headers: str | None
    ) -> Reply:
        """POST with this client's CSRF token (fetched first if it has none), unless the
        form already says `csrf`, and with the dashboard's own `Origin` unless `origin=`
        says another (None: no Origin header at all)."""
        if self.cookie("taskq_csrf") is None:
            await self.get("/static/dashboard.css")
        fields = {"csrf": self.cookie("taskq_csrf") or "", **(form or {})}
        sent = _names({"origin": self.base, **headers})
        return await asyncio.to_thread(self.request, "POST", path, fields, sent)

    async def send(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> Reply:
        """A request exactly as given: no CSRF token fetched or added, no Origin."""
        return await asyncio.to_thread(self.request, method, path, form, _names(headers))

    async def api(self, path: str) -> Any:
        """GET /api<path> and its JSON, checking the status is 200."""
        reply = await self.get("/api" + path)
        assert reply.status == 200, (reply.status, reply.body[:500])
        return reply.json()


def _names(headers: dict[str, str | None]) -> dict[str, str]:
    """`x_csrf_token=...` keyword arguments as `x-csrf-token` headers (None: not sent)."""
    return {k.replace("_", "-"): v for k, v in headers.items() if v is not None}
