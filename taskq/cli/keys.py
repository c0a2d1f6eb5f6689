"""`taskq new-key`: a fresh encryption key for encryption at rest (docs/operations.md)."""

from __future__ import annotations

import json

import click

from taskq.records.sealing import key_id, new_key, parse_key


@click.command("new-key")
@click.option("--json", "as_json", is_flag=True, help="print {key, id} as JSON")
def new_key_command(as_json: bool) -> None:
    """Print a new 32-byte encryption key (URL-safe base64) for TASKQ_ENCRYPTION_KEY.

    Give it to every producer and worker of the app; to rotate, make a new one the key and
    move the old one to TASKQ_OLD_KEYS until nothing sealed with it is left."""
    key = new_key()
    ident = key_id(parse_key(key)).hex()
    click.echo(json.dumps({"key": key, "id": ident}) if as_json else key)
