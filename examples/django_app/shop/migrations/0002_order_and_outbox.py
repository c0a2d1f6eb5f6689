"""The Order model, and taskq's outbox table (docs/outbox.md: the schema as SQL, here
SQLite's; on Postgres, the statements docs/outbox.md gives)."""

from django.db import migrations, models

OUTBOX = """
CREATE TABLE IF NOT EXISTS taskq_outbox (
    id INTEGER PRIMARY KEY,
    prefix TEXT NOT NULL,
    task_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    partition_key TEXT,
    priority INTEGER,
    body BLOB NOT NULL,
    created_at DATETIME NOT NULL
);
CREATE INDEX IF NOT EXISTS taskq_outbox_by_prefix ON taskq_outbox (prefix, id);
"""


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("item", models.CharField(max_length=200)),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
        migrations.RunSQL(OUTBOX, "DROP TABLE taskq_outbox;"),
    ]
