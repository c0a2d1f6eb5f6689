"""taskq.outbox.django in a real Django project (settings configured in this process, a
SQLite database): `enqueue_in` inside `transaction.atomic()` and `enqueue_on_commit`,
rolled back and committed. Django's ORM is synchronous: it runs in a thread here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskq import App
from taskq.errors import ArgumentsError
from taskq.outbox.database import create_table
from tests.conftest import running_worker, wait_until
from tests.outbox.conftest import running_relay


class Failed(Exception):
    pass


@pytest.fixture(scope="session")
def django_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import django
    from django.conf import settings

    path = tmp_path_factory.mktemp("django") / "app.db"
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}},
            INSTALLED_APPS=[],
            USE_TZ=True,
        )
        django.setup()
    name = Path(settings.DATABASES["default"]["NAME"])
    url = f"sqlite:///{name}"
    asyncio.run(create_table(url))
    yield url


async def test_enqueue_in_and_on_commit_follow_the_django_transaction(
    app: App, django_db: str
) -> None:
    from django.db import connection, transaction

    from taskq.outbox.django import enqueue_in, enqueue_on_commit

    ran: list[str] = []

    @app.task
    async def note(word: str) -> str:
        ran.append(word)
        return word

    def in_django() -> list[str]:
        ids = []
        with pytest.raises(Failed), transaction.atomic():  # rolled back: neither
            enqueue_in(note, "rolled-back-outbox")
            enqueue_on_commit(note, "rolled-back-on-commit")
            raise Failed
        with transaction.atomic():
            ids.append(enqueue_in(note.options(key="kept-1"), "kept-outbox").id)
            ids.append(note.enqueue_in(connection, "via-connection").id)  # django.db's proxy
            enqueue_on_commit(note, "kept-on-commit")  # published once this commits
        with pytest.raises(ArgumentsError), transaction.atomic():
            enqueue_on_commit(note, 7)  # checked at the call, not after the commit
        return ids

    async with running_worker(app), running_relay(app, django_db, poll=0.05) as relay:
        ids = await asyncio.to_thread(in_django)
        assert await app.handle(ids[0]).result(timeout=30) == "kept-outbox"
        await wait_until(lambda: len(ran) == 3 and relay.stats["published"] == 2)
    assert sorted(ran) == ["kept-on-commit", "kept-outbox", "via-connection"]
