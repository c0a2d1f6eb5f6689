"""The outbox table: one row per task enqueued inside an application's transaction, kept
until a relay has published it. This SQLAlchemy Table is the schema `taskq outbox init`
creates and docs/outbox.md spells out for Alembic or Django migrations."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
)

TABLE = "taskq_outbox"
CHANNEL = "taskq_outbox"  # Postgres NOTIFY channel: a commit with rows wakes the relays

metadata = MetaData()
outbox = Table(
    TABLE,
    metadata,
    # ids in insertion order: a relay publishes the rows it sees in this order
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("prefix", Text, nullable=False),  # the App's prefix: each relay takes its own
    Column("task_id", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("partition_key", Text),  # places the message (None: its id does)
    Column("priority", Integer),  # None: the task's own
    Column("body", LargeBinary, nullable=False),  # the validated envelope, as published
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("taskq_outbox_by_prefix", "prefix", "id"),
)
