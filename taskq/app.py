"""The App: the task registry, its settings and extension points, and one Client per loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import fields
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from taskq.batching import Batching
from taskq.client import Client
from taskq.clock import Clock
from taskq.errors import ConfigError
from taskq.habits import unknown_options
from taskq.handle import TaskHandle
from taskq.hooks import Hook, Hooks
from taskq.middleware import Chain
from taskq.operate import history, queue_control, task_list
from taskq.operate.queue_control import QueuePause
from taskq.policy import RetryPolicy
from taskq.portal import Portal
from taskq.records.firings import check_catch_up
from taskq.records.history import Window
from taskq.records.schedules import Periodic, expression
from taskq.settings import Settings
from taskq.task import CallOptions, Task, TaskSpec
from taskq.telemetry import Telemetry
from taskq.topology.names import Names, check_queue, check_task
from taskq.topology.partitions import check_partitions

if TYPE_CHECKING:
    from taskq.workflows.runs import WorkflowDef, WorkflowRun

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=Hook)

# "thread" and "process" are refused until they run as such (the process pool is its own work)
EXECUTORS = ("default", "process", "spark")


class App:
    """A taskq application: declare tasks with `@app.task`, enqueue them, run workers on them.

    `url` defaults to `TASKQ_URL` or nats://127.0.0.1:4222; `prefix` to `TASKQ_PREFIX` or
    "taskq". `middleware` wraps every run and enqueue (see `taskq.middleware`). Other keyword
    arguments are `Settings` fields (credentials, replicas, ...).
    """

    def __init__(
        self,
        url: str | None = None,
        prefix: str | None = None,
        *,
        middleware: Iterable[object] = (),
        **settings: Any,
    ) -> None:
        self.settings = Settings.load(url=url, prefix=prefix, **settings)
        self._names = Names(self.settings.prefix)
        self.clock = Clock()  # what "now" is for this app's Clients (taskq.clock)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.workflows: dict[str, WorkflowDef] = {}  # durable workflows, by name
        self.periodics: dict[str, Periodic] = {}
        self.hooks = Hooks()
        # OpenTelemetry first: outermost, so its spans and counts see what the worker judges
        self._middleware = Chain([Telemetry(), *middleware], reserved=TASK_OPTIONS)
        self._declared: dict[str, int] = {}  # queue -> partitions, as declared in code
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )
        self._connecting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._portal: Portal | None = None
        self._portal_lock = threading.Lock()

    @property
    def names(self) -> Names:
        # cached per prefix: the worker reads it per delivery, and Names validates its prefix
        if self._names.prefix != self.settings.prefix:
            self._names = Names(self.settings.prefix)
        return self._names

    @property
    def middleware(self) -> Chain:
        return self._middleware

    def add_middleware(self, middleware: object) -> None:
        """Add a middleware, innermost of those added so far."""
        self._middleware.add(middleware)

    @overload
    def on_worker_start(self, hook: H, *, children: bool = True) -> H: ...
    @overload
    def on_worker_start(self, *, children: bool = True) -> Callable[[H], H]: ...
    def on_worker_start(self, hook: Any = None, *, children: bool = True) -> Any:
        """Decorator: run `hook()` once per worker process before it takes any task, and
        once in each pool process of `executor="process"` tasks unless `children=False`."""
        return self._hook(self.hooks.start, hook, children)

    @overload
    def on_worker_stop(self, hook: H, *, children: bool = True) -> H: ...
    @overload
    def on_worker_stop(self, *, children: bool = True) -> Callable[[H], H]: ...
    def on_worker_stop(self, hook: Any = None, *, children: bool = True) -> Any:
        """Decorator: run `hook()` once per worker process after its last task settled,
        and when a pool process stops gracefully unless `children=False`."""
        return self._hook(self.hooks.stop, hook, children)

    def _hook(self, hooks: list[Hook], hook: Any, children: bool) -> Any:
        def register(fn: H) -> H:
            hooks.append(fn)
            if not children:
                self.hooks.worker_only.append(fn)
            return fn

        return register if hook is None else register(hook)

    def configure(self, **changes: Any) -> None:
        """Change settings (e.g. from CLI flags) before connecting."""
        self.settings = self.settings.replace(**changes)

    # -- declaring tasks -------------------------------------------------------------------
    @overload
    def task(self, fn: F) -> Task[Any, Any]: ...

    @overload
    def task(self, fn: None = None, **options: Any) -> Callable[[F], Task[Any, Any]]: ...

    def task(self, fn: Any = None, **options: Any) -> Any:
        """Register a function as a task. Usable bare (`@app.task`) or with options."""
        if fn is not None:
            return self._register(fn, **options)
        return lambda f: self._register(f, **options)

    def batch_task(
        self, *, batch_size: int = 1000, max_wait: float = 2.0, **options: Any
    ) -> Callable[[F], Task[Any, Any]]:
        """Register a per-item function as a Spark batch task.

        Each message is one item: the worker gathers up to `batch_size` messages of the task
        (or what arrived within `max_wait` seconds), runs the function over them as one
        Spark job across the executors, and settles every message on its own outcome. Other
        options are those of `task` (retries, timeout for the whole job, queue, ...).
        """
        options.setdefault("executor", "spark")
        batch = Batching(batch_size, max_wait)
        return lambda f: self._register(f, batch=batch, **options)

    def _register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str = "default",
        executor: str = "default",
        batch: Batching | None = None,
        partitions: int | None = None,
        **options: Any,
    ) -> Task[Any, Any]:
        task_name = check_task(name or fn.__name__)
        check_queue(queue)
        if partitions is not None:
            self.declare_queue(queue, partitions=partitions)
        if task_name in self.tasks:
            raise ConfigError(f"task {task_name!r} is already registered")
        _check_executor(task_name, fn, executor, batch)
        spec = _spec(task_name, queue, executor, batch, options, self._middleware.task_options)
        task: Task[Any, Any] = Task(self, fn, spec)
        _check_flow(task, self.settings.duplicate_window)
        self.tasks[task_name] = task
        return task

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        catch_up: str = "skip",
        **options: Any,
    ) -> Callable[[F], Task[Any, Any]]:
        """Register a task that the server runs on a schedule: `cron` (6 fields, seconds
        first, e.g. "0 */5 * * * *") or `every` (whole seconds). Workers register it when
        they start; `taskq schedules prune` removes schedules no longer in code.
        `catch_up` says what becomes of runs that fired while no worker moved them and
        are older than their period: "skip" drops them (recorded as dropped), "one" runs
        one of them, "all" runs every one (docs/results-workflows-schedules.md)."""
        schedule = expression(cron, every)
        policy = check_catch_up(catch_up)

        def register(fn: F) -> Task[Any, Any]:
            task = self._register(fn, **options)
            # fail at declaration: arguments the signature or the encoder (a nan) refuses
            task.build_envelope(list(args), dict(kwargs or {}), CallOptions()).encode()
            call = tuple(args), tuple((kwargs or {}).items())
            self.periodics[task.name] = Periodic(task.name, task.queue, schedule, *call, policy)
            return task

        return register

    def workflow(self, fn: Any = None, *, queue: str = "default", **options: Any) -> Any:
        """Register a durable workflow (`async def flow(wf: Workflow, ...)`): bare or with
        `name`, `queue` (where its decisions run) and `timeout` (seconds or a timedelta a
        run may take: past it, it fails with WorkflowTimeout); docs/workflows.md."""
        from taskq.workflows.runs import register_workflow

        if fn is not None:
            return register_workflow(self, fn, queue, **options)
        return lambda f: register_workflow(self, f, queue, **options)

    def workflow_run(self, run_id: str) -> WorkflowRun:
        """A durable workflow run from its id: signal, result, status, cancel."""
        from taskq.workflows.runs import WorkflowRun

        return WorkflowRun(run_id, self, "", "")

    def declare_queue(self, name: str, *, partitions: int = 1) -> None:
        """Declare a queue's layout: `partitions=N` spreads it over N streams (placed on
        different nodes of a cluster), producers choosing one per task by key hash or round
        robin, workers consuming all of them. Undeclared queues use what the server has."""
        check_queue(name)
        check_partitions(name, partitions)
        if self._declared.get(name, partitions) != partitions:
            raise ConfigError(
                f"queue {name!r} is already declared with {self._declared[name]} partition(s)"
            )
        self._declared[name] = partitions

    def declared_queues(self) -> dict[str, int]:
        """Queues whose layout the code declares, with their partitions (a copy)."""
        return dict(self._declared)

    def handle(self, task_id: str, task: str = "", queue: str = "") -> TaskHandle:
        """A handle for a task id seen elsewhere (a log line, another process)."""
        return TaskHandle(task_id, task, queue, 0, False, self)

    def queues(self) -> list[str]:
        """Queues that registered tasks use, in declaration order."""
        return list(dict.fromkeys(t.queue for t in self.tasks.values()))

    # -- operating queues (every partition at once; see taskq.operate.queue_control) ---------------
    async def pause_queue(
        self, queue: str, for_: float | timedelta | None = None, until: datetime | None = None
    ) -> QueuePause:
        """Stop workers receiving `queue`'s tasks for `for_` (seconds or timedelta), until
        `until`, or until `resume_queue`. Running tasks finish; enqueueing keeps working."""
        return await queue_control.pause_queue(self, queue, for_=for_, until=until)

    async def resume_queue(self, queue: str) -> QueuePause:
        """Let workers receive `queue`'s tasks again."""
        return await queue_control.resume_queue(self, queue)

    async def purge_queue(self, queue: str, task: str | None = None) -> int:
        """Remove the tasks `queue` holds (only `task`'s, if given); returns how many."""
        return await queue_control.purge_queue(self, queue, task)

    async def history(
        self, *, queue: str | None = None, task: str | None = None, span: str = "1h"
    ) -> list[Window]:
        """What settled per window over the last hour (`1h`) or day (`24h`), for every queue,
        `queue` or the task named `task` (`taskq history`; taskq.operate.history)."""
        return await history.history(self, queue=queue, task=task, span=span)

    async def recent_tasks(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        id_prefix: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> task_list.TaskPage:
        """A page of recorded tasks, newest first, matching the filters (each None: any);
        `before` is the `older` cursor of the page before (`taskq tasks ls`)."""
        filters = task_list.TaskFilters(name, queue, state, id_prefix)
        return await task_list.recent(self, filters, limit=limit, before=before)

    # -- connection ------------------------------------------------------------------------
    @property
    def portal(self) -> Portal:
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal()
            return self._portal

    async def client(self) -> Client:
        """The Client for the running event loop (one per loop, connected on first use)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is not None:
            return client
        lock = self._connecting.setdefault(loop, asyncio.Lock())
        async with lock:
            client = self._clients.get(loop)
            if client is None:
                client = await Client.connect(self.settings, self._declared, self.clock)
                self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close this loop's connection."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def close(self) -> None:
        """Close the synchronous side (the portal's connection and thread)."""
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is not None:
            try:
                portal.run(self.aclose(), timeout=10)
            finally:
                portal.stop()


def _check_executor(
    name: str, fn: Callable[..., Any], executor: str, batch: Batching | None
) -> None:
    if executor not in EXECUTORS:
        raise ConfigError(
            f"task {name!r}: executor must be one of {EXECUTORS} "
            "(plain `def` tasks run in threads with the default)"
        )
    if executor == "spark":
        if batch is not None:
            batch.check(name)
        if inspect.iscoroutinefunction(fn):  # it runs in a thread (job) or on executors (items)
            raise ConfigError(f"task {name!r}: a Spark task's function must be a plain def")
    elif batch is not None:
        raise ConfigError(f"task {name!r}: batch tasks run on the spark executor only")
    if executor == "process" and "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        # a pool process finds the function by importing its module, as pickle would
        raise ConfigError(
            f"task {name!r}: a process task must be defined at module level "
            "(pool processes import it by module and name)"
        )


def _check_flow(task: Task[Any, Any], duplicate_window: float) -> None:
    """Limits a task cannot have: on batch items (no judge per item), or with a lease so
    long that a held task's crash-window check outlives the dedup window it relies on."""
    if task.limits is None:
        return
    if task.batch is not None:
        raise ConfigError(f"task {task.name!r}: batch tasks take no concurrency or rate limits")
    if task.ack_wait > duplicate_window / 2:
        raise ConfigError(
            f"task {task.name!r}: a task with limits needs ack_wait <= duplicate_window / 2 "
            f"({duplicate_window / 2:g}s), not {task.ack_wait:g}s (docs/flow-control.md)"
        )


_POLICY_FIELDS = frozenset(f.name for f in fields(RetryPolicy))
_SPEC_OWN = ("name", "queue", "policy", "executor", "batch", "middleware_options")
_RUN_FIELDS = frozenset(f.name for f in fields(TaskSpec)) - set(_SPEC_OWN)
# every option `@app.task` takes itself: no middleware may declare one of these
TASK_OPTIONS = _POLICY_FIELDS | _RUN_FIELDS | {"name", "queue", "executor", "partitions"}


def _spec(
    name: str,
    queue: str,
    executor: str,
    batch: Batching | None,
    options: dict[str, Any],
    declared: frozenset[str] = frozenset(),
) -> TaskSpec:
    """The TaskSpec for `@app.task` options (RetryPolicy's fields and TaskSpec's own, each
    with the default its dataclass gives, and those a middleware `declared`); ConfigError
    names an unknown or bad one."""
    unknown = set(options) - _POLICY_FIELDS - _RUN_FIELDS - declared
    if unknown:
        raise ConfigError(unknown_options(name, sorted(unknown)))
    policy = {k: v for k, v in options.items() if k in _POLICY_FIELDS}
    retries = policy.get("max_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(
            f"task {name!r}: max_retries is a whole number >= 0, not {retries!r} (taskq has "
            "no unlimited retries: give a large number, and retry_for= to choose what retries)"
        )
    for key in ("retry_for", "give_up_on"):
        if key in policy:
            policy[key] = tuple(policy[key])
    run = {k: v for k, v in options.items() if k in _RUN_FIELDS}
    extra = MappingProxyType({k: v for k, v in options.items() if k in declared})
    return TaskSpec(
        name, queue, RetryPolicy(**policy), executor=executor, batch=batch,
        middleware_options=extra, **run,
    )  # fmt: skip
