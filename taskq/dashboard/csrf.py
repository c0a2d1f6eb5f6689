"""The CSRF tokens a dashboard issues, and the check that a token is one of them.

A token is a random nonce and its HMAC under a key only the dashboard holds: derived from
the dashboard's token when it has one (so every dashboard sharing that token, side by side
or behind a load balancer, accepts the others' pages), else random for each process (a
restarted dashboard issues new tokens; a page from before asks to be reloaded). A browser
shares a host's cookies across its ports, so a page on another port of the same host can
plant a `taskq_csrf` cookie and repeat it in its form: that value was not signed here, and is
refused (and replaced by one that was). See docs/dashboard.md, "Security".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

LABEL = b"taskq-dashboard-csrf"  # not the sign-in cookie's label: another key


class CsrfTokens:
    """Issues and verifies one dashboard's CSRF tokens (`nonce.mac`, URL-safe)."""

    def __init__(self, dashboard_token: str | None) -> None:
        if dashboard_token:
            self._key = hmac.new(dashboard_token.encode(), LABEL, hashlib.sha256).digest()
        else:
            self._key = secrets.token_bytes(32)

    def issue(self) -> str:
        """A new token."""
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._mac(nonce)}"

    def issued(self, value: str) -> bool:
        """Whether `value` is a token this dashboard (or one sharing its key) issued."""
        nonce, dot, mac = value.partition(".")
        if not (nonce and dot and mac):
            return False
        return hmac.compare_digest(mac.encode(), self._mac(nonce).encode())

    def _mac(self, nonce: str) -> str:
        digest = hmac.new(self._key, nonce.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
