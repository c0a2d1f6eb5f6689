"""Running the guides' code blocks as written (docs/tutorial.md, docs/from-celery.md): the
helpers of tests/test_guides.py.

A guide's fenced blocks say what they are by their first line:

* a ```python or ```ini block headed `# NAME.py` (or `# NAME.ini`) is a whole file;
  `# NAME.py, continued` is appended to it; `# NAME.py, changed` replaces, line by line,
  the line of NAME.py that assigns the same name;
* a ```python block headed `# in async code` runs with top-level `await` in the test's event
  loop, one headed `# in sync code` in a thread (both with a worker running);
* a ```python block headed `# Celery` or `# Dramatiq` is another library's code: compiled
  (so its syntax is right), never run;
* a ```sh block is commands, one a line, run by bash (comment lines skipped); a line must
  exit 0, or N when it ends with a comment saying `exits N`;
* a ```text block is what the block before it prints: each line a pattern in which `...`
  stands for any text and a run of spaces for any run of spaces.

Any other ```python block is an error: no snippet goes untested by accident.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from tests.cli_runner import PROGRAM, run_in_process
from tests.conftest import ROOT, wait_until

DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent  # the virtualenv's bin: taskq, python, pytest
FILE = re.compile(r"# ([\w.-]+\.(?:py|ini))(?:, (continued|changed))?")
FRAGMENTS = {"# in async code": "async", "# in sync code": "sync"}
FOREIGN = ("# Celery", "# Dramatiq")
EXITS = re.compile(r"#.*\bexits (\d+)")
BLOCKING = ("server", "worker", "dashboard")  # `taskq` commands that run until stopped
# `taskq ARGS` or `NAME=$(taskq ARGS)`, an optional comment after: no pipes, redirections,
# other substitutions or globs, only `$NAME` variables (Shell.run runs these in process)
SIMPLE_TASKQ = re.compile(
    r"(?:(?P<name>[A-Za-z_]\w*)=\$\((?P<inner>taskq [^()`|;&<>*?#]*)\)"
    r"|(?P<plain>taskq [^()`|;&<>*?#]*))\s*(?:#.*)?"
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a guide: its language, its text, and where it starts."""

    path: Path
    line: int  # the line of the block's first text line, 1-based
    lang: str
    text: str

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"

    @property
    def head(self) -> str:
        return self.text.split("\n", 1)[0].strip()

    @property
    def kind(self) -> str:
        """file, continued, changed, async, sync, foreign, sh or text (AssertionError for
        a block the guide test cannot run)."""
        if self.lang in ("sh", "text"):
            return self.lang
        match = FILE.fullmatch(self.head)
        if match:
            return match.group(2) or "file"
        if self.lang == "python" and self.head in FRAGMENTS:
            return FRAGMENTS[self.head]
        if self.lang == "python" and self.head in FOREIGN:
            return "foreign"
        raise AssertionError(
            f"{self.where}: a ```{self.lang} block headed {self.head!r}: head it with "
            "`# NAME.py`, `# in async code`, `# in sync code`, `# Celery` or `# Dramatiq` "
            "(tests/guides.py) so that the guide test runs it"
        )

    @property
    def file(self) -> str:
        match = FILE.fullmatch(self.head)
        assert match, self.where
        return match.group(1)

    def commands(self) -> list[str]:
        """The command lines of a ```sh block (blank and comment-only lines left out)."""
        lines = [line.strip() for line in self.text.splitlines()]
        return [line for line in lines if line and not line.startswith("#")]


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.fullmatch(r"\s*```\s*(\w*).*", line)
        if lang is None and fence:
            assert not line.startswith(" "), f"{path}:{number}: an indented fence"
            lang, start, body = fence.group(1), number + 1, []
        elif lang is not None and line.strip() == "```":
            blocks.append(Block(path, start, lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{path}: a fence opened at line {start - 1} is never closed"
    return blocks


class Project:
    """The reader's project directory: the files the guide has them write."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def apply(self, block: Block) -> None:
        path = self.root / block.file
        body = block.text.split("\n", 1)[1]
        if block.kind == "file":
            assert not path.exists(), f"{block.where}: {block.file} is written twice"
            path.write_text(block.text)
        elif block.kind == "continued":
            path.write_text(path.read_text() + "\n\n" + body)
        else:
            path.write_text(_changed(path.read_text(), body, block.where))


def _changed(source: str, body: str, where: str) -> str:
    lines = source.splitlines()
    for new in filter(str.strip, body.splitlines()):
        name = new.split("=", 1)[0].strip()
        found = [i for i, old in enumerate(lines) if old.startswith(f"{name} =")]
        assert len(found) == 1, f"{where}: {len(found)} lines assign {name!r}, not 1"
        lines[found[0]] = new
    return "\n".join(lines) + "\n"


def compiled(block: Block) -> types.CodeType:
    """A python block compiled with its lines numbered as in the guide (so a traceback
    points at the guide), top-level `await` allowed."""
    tree = ast.parse(block.text, str(block.path))
    ast.increment_lineno(tree, block.line - 1)
    return compile(tree, str(block.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


async def run_fragment(block: Block) -> None:
    """Run an `# in async code` block in this event loop, an `# in sync code` one in a
    thread, each in a namespace of its own (every fragment imports what it uses)."""
    code = compiled(block)
    function = types.FunctionType(code, {"__name__": "__guide__"})
    if block.kind == "async":
        result = function()
        if asyncio.iscoroutine(result):
            await result
    else:
        assert block.kind == "sync", block.where
        await asyncio.to_thread(function)


def check_output(block: Block, produced: str) -> None:
    """Every line of a ```text block matches a whole line of what was produced."""
    got = [" ".join(line.split()) for line in produced.splitlines()]
    for want in filter(str.strip, block.text.splitlines()):
        want = " ".join(want.split())
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        assert any(re.fullmatch(pattern, line) for line in got), (
            f"{block.where}: no line of the output matches {want!r}; the output:\n{produced}"
        )


def environment(**extra: str) -> dict[str, str]:
    """A reader's environment: the virtualenv's bin first on PATH, no TASKQ_ or PYTEST_
    variables of this test session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "PYTEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


@dataclass
class Shell:
    """Runs a guide's command lines as a reader's terminal would, one bash per line,
    carrying the variables lines assign (`ID=$(taskq enqueue ...)`) to later lines."""

    cwd: Path
    env: dict[str, str]
    variables: dict[str, str] = field(default_factory=dict)

    def run(self, line: str, where: str) -> str:
        """Run `line`; check its exit status (0, or what its `exits N` comment says);
        return what it printed (stdout, then stderr)."""
        expected = EXITS.search(line)
        status = int(expected.group(1)) if expected else 0
        quick = self._taskq_in_process(line)
        if quick is not None:
            code, output = quick
            assert code == status, f"{where}: `{line}` exited {code}:\n{output}"
            return output
        assigned = re.findall(r"^([A-Za-z_]\w*)=", line)
        script = [f"{name}={shlex.quote(value)}" for name, value in self.variables.items()]
        script += [line, "status=$?"]
        read, write = os.pipe()  # the assigned values come back on it, NUL-separated
        script += [f'printf "%s\\0" "${name}" >&{write}' for name in assigned]
        script.append("exit $status")
        try:
            done = subprocess.run(
                ["bash", "-c", "\n".join(script)],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=180,
                stdin=subprocess.DEVNULL,
                pass_fds=(write,),
            )
        finally:
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                values = pipe.read().decode().split("\0")
        output = done.stdout + done.stderr
        assert done.returncode == status, f"{where}: `{line}` exited {done.returncode}:\n{output}"
        self.variables.update(zip(assigned, values, strict=False))
        return output

    def _taskq_in_process(self, line: str) -> tuple[int, str] | None:
        """A plain `taskq ...` line, or `NAME=$(taskq ...)`, run in this process as bash
        would have run it (tests/cli_runner.py: no 1 s interpreter start per command);
        None for any other line (bash runs it). (exit code, what the terminal showed)."""
        found = SIMPLE_TASKQ.fullmatch(line)
        if found is None:
            return None
        command = found.group("inner") or found.group("plain")
        names = re.findall(r"\$([A-Za-z_]\w*)", command)
        if any(name not in self.variables for name in names):
            return None
        command = re.sub(
            r"\$([A-Za-z_]\w*)", lambda v: shlex.quote(self.variables[v.group(1)]), command
        )
        argv = shlex.split(command, comments=True)
        if argv[1] in BLOCKING:
            return None
        done = run_in_process([*PROGRAM, *argv[1:]], None, 180, self.env, cwd=self.cwd)
        if done is None:
            return None
        if found.group("name"):  # $(...) takes its stdout, trailing newlines dropped
            self.variables[found.group("name")] = done.stdout.rstrip("\n")
            return done.returncode, done.stderr
        return done.returncode, done.stdout + done.stderr


def parse_only(line: str) -> click.Context:
    """Parse a `taskq ...` command line as the CLI would (options, their types, the
    subcommands) without running it: for commands that run until stopped."""
    from taskq.cli.main import cli

    argv = shlex.split(line, comments=True)
    assert argv[0] == "taskq", line
    ctx = cli.make_context("taskq", argv[1:])
    command: click.Command = cli
    rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]
    while isinstance(command, click.Group):
        name, found, rest = command.resolve_command(ctx, rest)
        assert name is not None and found is not None, line
        command = found
        ctx = command.make_context(name, rest, parent=ctx)
        rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]
    return ctx


class Background:
    """A command a reader leaves running in a terminal of its own (server, worker,
    dashboard), in a process group of its own, its output in a file."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 (closed in kill())
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_for(self, text: str | Callable[[str], bool], timeout: float = 60) -> None:
        """Wait until the output holds `text` (or satisfies it); fail if the process ends."""
        seen = text if callable(text) else lambda out: text in out
        await wait_until(lambda: seen(self.output()) or self.proc.poll() is not None, timeout)
        assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"

    async def stop(self, timeout: float = 60) -> int:
        """Ctrl-C: SIGINT, then its exit status."""
        self.proc.send_signal(signal.SIGINT)
        await wait_until(lambda: self.proc.poll() is not None, timeout)
        self._out.close()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL to its process group (it and what it started), if still running."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._out.close()
