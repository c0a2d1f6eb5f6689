"""The flow-control call options through `taskq enqueue` (docs/flow-control.md)."""

from __future__ import annotations

import json

from tests.conftest import run_cli

APP = "tests.apps.flowctl:app"


def enqueue(url: str, prefix: str, *args: str) -> dict[str, object]:
    result = run_cli(url, prefix, "enqueue", APP, *args, "--json")
    assert result.returncode == 0, result.stderr
    handle: dict[str, object] = json.loads(result.stdout)
    return handle


def test_unique_for_and_throttle_from_the_cli(nats_url: str, prefix: str) -> None:
    first = enqueue(nats_url, prefix, "ranked", '["a", 0]', "--unique-for", "30")
    again = enqueue(nats_url, prefix, "ranked", '["a", 0]', "--unique-for", "30")
    assert again["id"] == first["id"] and again["duplicate"] is True and first["duplicate"] is False
    kept = enqueue(nats_url, prefix, "ranked", '["b", 0]', "--throttle", "30", "--key", "k")
    extra = enqueue(nats_url, prefix, "ranked", '["c", 0]', "--throttle", "30", "--key", "k")
    assert kept["dropped"] is False and extra["dropped"] is True
    text = run_cli(
        nats_url, prefix, "enqueue", APP, "ranked", '["d", 0]', "--throttle", "30", "--key", "k"
    )
    assert text.returncode == 0 and "(dropped: throttled)" in text.stdout


def test_priority_and_bad_flow_options_are_usage_errors(nats_url: str, prefix: str) -> None:
    handle = enqueue(nats_url, prefix, "ranked", '["p", 0]', "--priority", "9")
    told = json.loads(run_cli(nats_url, prefix, "task", str(handle["id"]), "--json").stdout)
    assert told["state"] == "queued" and told["args"] == ["p", 0]  # found in its level's lane
    for args in (("--priority", "10"), ("--debounce", "1"), ("--unique-for", "0")):
        result = run_cli(nats_url, prefix, "enqueue", APP, "ranked", '["x", 0]', *args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
