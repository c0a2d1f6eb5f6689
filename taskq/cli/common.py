"""What every command shares: the global options (`Context`), loading an App, running a
coroutine on a connection that is always closed (`Context.run`), and argument parsing."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from taskq.app import App
from taskq.client import Client
from taskq.records.clock import SECONDS
from taskq.settings import Settings

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# What a command does with a connection: called with the Client, awaited, then it is closed.
Work = Callable[[Client], Awaitable[T]]


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed (faster I/O), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def load_app(spec: str) -> App:
    """Import `module:attribute` (the cwd is importable) and return the App it names."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise click.BadParameter(f"{spec!r} is not MODULE:APP", param_hint="APP")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="APP"
        ) from None
    except Exception as exc:  # a SyntaxError, a KeyError at import...: where, and what
        if logging.getLogger().isEnabledFor(logging.INFO):  # `-v`: the whole traceback
            traceback.print_exc()
        raise click.BadParameter(
            f"cannot import {module_name!r} ({failed_at(exc)}): "
            f"{type(exc).__name__}: {_first_line(exc)}",
            param_hint="APP",
        ) from None
    candidates = [attr] if attr else ["app"]
    for name in candidates:
        app = getattr(module, name, None)
        if isinstance(app, App):
            return app
    raise click.BadParameter(
        f"{module_name!r} has no taskq App named {candidates[0]!r}", param_hint="APP"
    )


def failed_at(exc: BaseException) -> str:
    """`app.py, line 3`: where importing a module failed: a SyntaxError's own place, else
    the innermost frame in a file under the current directory (the user's code), else the
    innermost frame."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{_shown(exc.filename)}, line {exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    here = str(Path.cwd())
    mine = [f for f in frames if f.filename.startswith(here)] or frames
    if not mine:
        return "?"
    return f"{_shown(mine[-1].filename)}, line {mine[-1].lineno}"


def _shown(filename: str) -> str:
    path = Path(filename)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return filename


def _first_line(exc: BaseException) -> str:
    text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    return (text.strip().splitlines() or [""])[0][:300]


class Context:
    """Global options shared by every command (connection and security settings)."""

    def __init__(self, url: str | None, prefix: str | None, **security: str | None) -> None:
        self.url = url
        self.prefix = prefix
        self.security = {k: v for k, v in security.items() if v is not None}

    def settings(self) -> Settings:
        """Settings from the global options, then `TASKQ_*` variables, then defaults."""
        return Settings.load(url=self.url, prefix=self.prefix, **self.security)

    def app(self, spec: str) -> App:
        """The App named by MODULE:APP, with the global options applied."""
        app = load_app(spec)
        app.configure(url=self.url, prefix=self.prefix, **self.security)
        return app

    def run(self, work: Work[T], app: App | None = None) -> T:
        """Run `work(client)` on an event loop and always close the connection after.

        With `app` the client is the App's (`app.client()`, closed by `app.aclose()`);
        without one it is connected from the global options alone.
        """
        return run_async(_connected(work, app if app is not None else self.settings()))


async def _connected(work: Work[T], source: App | Settings) -> T:
    if isinstance(source, App):
        client = await source.client()
        close = source.aclose
    else:
        client = await Client.connect(source)
        close = client.close
    try:
        return await work(client)
    finally:
        await close()


SECURITY_OPTIONS = (
    ("--user", "user", "TASKQ_USER"),
    ("--password", "password", "TASKQ_PASSWORD"),
    ("--token", "token", "TASKQ_TOKEN"),
    ("--nkey-seed", "nkey_seed", "TASKQ_NKEY_SEED"),
    ("--creds", "creds", "TASKQ_CREDS"),
    ("--tls-ca", "tls_ca", "TASKQ_TLS_CA"),
    ("--tls-cert", "tls_cert", "TASKQ_TLS_CERT"),
    ("--tls-key", "tls_key", "TASKQ_TLS_KEY"),
)


def security_options(fn: F) -> F:
    """The connection-security flags; each falls back to its TASKQ_* variable."""
    for flag, dest, env in reversed(SECURITY_OPTIONS):
        fn = click.option(flag, dest, metavar="VALUE", help=f"[env {env}]")(fn)
    return fn


pass_ctx = click.make_pass_decorator(Context)


def parse_json_args(text: str | None) -> tuple[list[Any], dict[str, Any]]:
    """JSON_ARGS: an array is positional, an object keyword, anything else one argument."""
    if not text:
        return [], {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="JSON_ARGS") from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_duration(_ctx: Any, _param: Any, value: str | None) -> float | None:
    """A DURATION option (click callback): `30s`, `15m`, `2h`, `7d` -> seconds."""
    if value is None:
        return None
    match = _DURATION.match(value.strip())
    if not match:
        raise click.BadParameter(f"{value!r} is not a duration like 30s, 15m, 2h or 7d")
    return float(match.group(1)) * SECONDS[match.group(2)]


def confirm(yes: bool, question: str | Callable[[], str], action: str) -> None:
    """Go on when `--yes` was given or the person at the terminal agrees to `question`
    (a callable is asked only then); a usage error when stdin is no terminal (nobody can
    confirm), abort when declined."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"refusing to {action} without --yes when nobody can confirm")
    click.confirm(question() if callable(question) else question, abort=True)
