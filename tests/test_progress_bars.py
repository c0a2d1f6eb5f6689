"""Progress bars on long CLI work, drawn on stderr only when it is a terminal, and
`taskq enqueue --from FILE` (one task per JSON line, every line checked first)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from taskq import App
from taskq.operate.queue_control import stored_tasks
from tests.apps import metered
from tests.conftest import ROOT, cli_argv, run_cli, running_worker, wait_until

LEDGER = "tests.apps.ledger:app"


def at_terminal(url: str, prefix: str, *args: str) -> tuple[int, str]:
    """Run `taskq ARGS` with stderr on a pseudo-terminal: (exit code, what it drew there)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cli_argv(url, prefix, *args),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    return proc.wait(60), drawn.decode(errors="replace")


def write_lines(path: Path, count: int) -> Path:
    lines = [
        json.dumps([f"t{i}"]) if i % 2 else json.dumps({"token": f"t{i}"}) for i in range(count)
    ]
    path.write_text("\n".join([*lines[:3], "", *lines[3:]]) + "\n")  # a blank line is skipped
    return path


async def test_enqueue_from_file(nats_url: str, prefix: str, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "tasks.jsonl", 1500)
    done = run_cli(nats_url, prefix, "enqueue", LEDGER, "quick", "--from", str(source))
    assert (done.returncode, done.stdout, done.stderr) == (0, "enqueued 1500 task(s)\n", "")
    app = App(url=nats_url, prefix=prefix)
    try:
        assert await stored_tasks(app, "default", "quick") == 1500
        # --json: one handle per line; `-` reads stdin
        done = run_cli(
            nats_url, prefix, "enqueue", LEDGER, "quick", "--from", "-", "--json", stdin='["a"]\n'
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["task"] == "quick"
        # a bad line is a usage error naming it, and nothing is enqueued
        source.write_text('["ok"]\n["also ok"]\n{"nope": 1}\n')
        bad = run_cli(nats_url, prefix, "enqueue", LEDGER, "quick", "--from", str(source))
        assert bad.returncode == 2 and "line 3:" in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        assert await stored_tasks(app, "default", "quick") == 1501
    finally:
        await app.aclose()
    both = run_cli(nats_url, prefix, "enqueue", LEDGER, "quick", '["x"]', "--from", str(source))
    assert both.returncode == 2 and "--from takes neither" in both.stderr


async def test_bars_at_a_terminal_only(
    app: App, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    # Given dead letters in two queues
    metered.app.configure(url=nats_url, prefix=prefix)
    try:
        async with running_worker(
            metered.app, queues=["default", "other"], sweeper=False
        ) as worker:
            for queue in ("default", "other") * 2:
                await metered.doomed.options(queue=queue).enqueue()
            await wait_until(lambda: worker.stats["dead"] == 4)
    finally:
        await metered.app.aclose()
    export = tmp_path / "dead.jsonl"
    # When long commands run with stderr on a terminal, each draws its bar to 100%
    commands = [
        ("export", "dlq", "export", "-o", str(export)),
        ("import", "dlq", "import", str(export)),  # all duplicates: the bar still runs
        ("requeue", "dlq", "requeue", "--all", "--queue", "other"),
        ("purge", "dlq", "purge", "--yes"),
        ("enqueue", "enqueue", LEDGER, "quick", "--from", str(write_lines(tmp_path / "t", 5))),
        ("purge", "queues", "purge", "default", "--yes"),
    ]
    for label, *args in commands:
        code, drawn = at_terminal(nats_url, prefix, *args)
        assert code == 0 and label in drawn and "100%" in drawn, (args, drawn)
    # Then in a pipe the same work prints only its result
    piped = run_cli(nats_url, prefix, "enqueue", LEDGER, "quick", "--from", str(tmp_path / "t"))
    assert piped.stderr == "" and piped.stdout == "enqueued 5 task(s)\n"
    piped = run_cli(nats_url, prefix, "dlq", "export", "-o", str(export))
    assert piped.stderr == "exported 0 dead letter(s)\n"
