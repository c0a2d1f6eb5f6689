"""The App: task registry, settings, and the producer side (publishing tasks)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload

from taskq.batching import Batching
from taskq.envelope import MSG_ID, TASK_HEADER, Envelope, format_time, now_iso
from taskq.errors import ConfigError
from taskq.handle import TaskHandle
from taskq.ids import new_id
from taskq.jetstream import Broker
from taskq.names import Names, check_queue, check_task
from taskq.partitions import Part, Placement, check_partitions, layout, partitions_by_probe
from taskq.policy import RetryPolicy
from taskq.portal import Portal
from taskq.retrying import retry_transient
from taskq.schedules import Periodic, due_time, expression, publish_delayed
from taskq.settings import Settings
from taskq.task import CallOptions, Task
from taskq.telemetry import producing
from taskq.topology import check_owner, queue_stream

F = TypeVar("F", bound=Callable[..., Any])

EXECUTORS = ("default", "thread", "process", "spark")


class App:
    """A taskq application: declare tasks with `@app.task`, enqueue them, run workers on them.

    `url` defaults to `TASKQ_URL` or nats://127.0.0.1:4222; `prefix` to `TASKQ_PREFIX` or
    "taskq". Other keyword arguments are `Settings` fields (credentials, replicas, ...).
    """

    def __init__(self, url: str | None = None, prefix: str | None = None, **settings: Any) -> None:
        self.settings = Settings.load(url=url, prefix=prefix, **settings)
        self._names = Names(self.settings.prefix)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.periodics: dict[str, Periodic] = {}
        self._brokers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Broker] = (
            weakref.WeakKeyDictionary()
        )
        self._connecting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._ready_queues: set[tuple[int, str, Part]] = set()
        self._declared: dict[str, int] = {}  # queue -> partitions, as declared in code
        self._learned: dict[tuple[int, str], int] = {}  # (connection, queue) -> from server
        self._laid_out: dict[tuple[int, str], int] = {}  # streams ensured on this connection
        self._placement = Placement()
        self._portal: Portal | None = None
        self._portal_lock = threading.Lock()

    @property
    def names(self) -> Names:
        # cached per prefix: built on every publish otherwise (and validated each time)
        if self._names.prefix != self.settings.prefix:
            self._names = Names(self.settings.prefix)
        return self._names

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
        max_retries: int = 3,
        ack_wait: float = 30.0,
        timeout: float | None = None,
        retry_for: tuple[type[BaseException], ...] = (Exception,),
        give_up_on: tuple[type[BaseException], ...] = (),
        ack_sync: bool = False,
        backoff: float = 1.0,
        backoff_max: float = 300.0,
        jitter: float = 1.0,
        executor: str = "default",
        store_result: bool = True,
        batch: Batching | None = None,
        partitions: int | None = None,
    ) -> Task[Any, Any]:
        task_name = check_task(name or fn.__name__)
        check_queue(queue)
        if partitions is not None:
            self.declare_queue(queue, partitions=partitions)
        if task_name in self.tasks:
            raise ConfigError(f"task {task_name!r} is already registered")
        if max_retries < 0:
            raise ConfigError(f"task {task_name!r}: max_retries must be >= 0")
        if executor not in EXECUTORS:
            raise ConfigError(f"task {task_name!r}: executor must be one of {EXECUTORS}")
        if executor == "spark":
            _check_spark_task(task_name, fn, batch)
        elif batch is not None:
            raise ConfigError(f"task {task_name!r}: batch tasks run on the spark executor only")
        policy = RetryPolicy(
            max_retries=max_retries,
            backoff=backoff,
            backoff_max=backoff_max,
            jitter=jitter,
            retry_for=tuple(retry_for),
            give_up_on=tuple(give_up_on),
        )
        task: Task[Any, Any] = Task(
            self,
            fn,
            name=task_name,
            queue=queue,
            policy=policy,
            ack_wait=ack_wait,
            timeout=timeout,
            ack_sync=ack_sync,
            executor=executor,
            store_result=store_result,
            batch=batch,
        )
        self.tasks[task_name] = task
        return task

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> Callable[[F], Task[Any, Any]]:
        """Register a task that the server runs on a schedule: `cron` (6 fields, seconds
        first, e.g. "0 */5 * * * *") or `every` (whole seconds). Workers register it when
        they start; `taskq schedules prune` removes schedules no longer in code."""
        schedule = expression(cron, every)

        def register(fn: F) -> Task[Any, Any]:
            task = self._register(fn, **options)
            task.validator.for_wire(list(args), dict(kwargs or {}))  # fail at declaration
            self.periodics[task.name] = Periodic(
                task.name, task.queue, schedule, tuple(args), tuple((kwargs or {}).items())
            )
            return task

        return register

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

    async def queue_partitions(self, queue: str) -> int:
        """How many partitions `queue` has: as declared, else as found on the server."""
        declared = self._declared.get(queue)
        if declared is not None:
            return declared
        broker = await self.broker()
        key = (id(broker), queue)
        if key not in self._learned:
            self._learned[key] = await partitions_by_probe(broker, self.names, queue)
        return self._learned[key]

    async def place(self, queue: str, key: str | None = None) -> Part:
        """The partition (None: unpartitioned) a new message of `queue` goes to. `key`
        picks a partition by hash, so the same key always meets the same stream's dedup
        window; no key: round robin."""
        return (await self.spread(queue, 1, key))[0]

    async def spread(self, queue: str, count: int, key: str | None = None) -> list[Part]:
        """Partitions for `count` new messages: round robin, or all in the one `key` picks.
        Every partition's stream is made on first use, so the layout on the server is
        whole for workers and `taskq queues` that learn it from there."""
        broker = await self.broker()
        partitions = self._laid_out.get((id(broker), queue))
        if partitions is None:  # once per connection: the hot path is the lookup above
            partitions = await retry_transient(
                lambda: self.queue_partitions(queue), what="queue set-up"
            )
            for part in layout(partitions):
                await retry_transient(
                    lambda p=part: self.ensure_queue(queue, p),  # type: ignore[misc]
                    what="queue set-up",
                )
            self._laid_out[(id(broker), queue)] = partitions
        return [self._placement.pick(queue, partitions, key) for _ in range(count)]

    def handle(self, task_id: str, task: str = "", queue: str = "") -> TaskHandle:
        """A handle for a task id seen elsewhere (a log line, another process)."""
        return TaskHandle(task_id, task, queue, 0, False, self)

    def queues(self) -> list[str]:
        """Queues that registered tasks use, in declaration order."""
        return list(dict.fromkeys(t.queue for t in self.tasks.values()))

    # -- connection ------------------------------------------------------------------------
    @property
    def portal(self) -> Portal:
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal()
            return self._portal

    async def broker(self) -> Broker:
        """The connection for the running event loop (one per loop, made on first use)."""
        loop = asyncio.get_running_loop()
        broker = self._brokers.get(loop)
        if broker is not None:
            return broker
        lock = self._connecting.setdefault(loop, asyncio.Lock())
        async with lock:
            broker = self._brokers.get(loop)
            if broker is None:
                broker = await Broker.connect(self.settings)
                self._brokers[loop] = broker
        return broker

    async def ensure_queue(self, queue: str, partition: Part = None) -> None:
        """Create a queue's stream (or one partition's) if missing, once per connection."""
        broker = await self.broker()
        key = (id(broker), queue, partition)
        if key in self._ready_queues:
            return
        spec = queue_stream(self.names, self.settings, queue, partition)
        # Look before creating: a producer may lack stream-create rights (workers and
        # operators create streams and apply config drift); a missing stream is created.
        subjects = await broker.stream_subjects(spec.name)
        check_owner(spec, subjects)
        if subjects is None:
            await broker.ensure_stream(spec)
        self._ready_queues.add(key)

    async def aclose(self) -> None:
        """Close this loop's connection."""
        loop = asyncio.get_running_loop()
        broker = self._brokers.pop(loop, None)
        if broker is not None:
            self._ready_queues = {k for k in self._ready_queues if k[0] != id(broker)}
            self._learned = {k: v for k, v in self._learned.items() if k[0] != id(broker)}
            self._laid_out = {k: v for k, v in self._laid_out.items() if k[0] != id(broker)}
            await broker.close()

    def close(self) -> None:
        """Close the synchronous side (the portal's connection and thread)."""
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is not None:
            try:
                portal.run(self.aclose(), timeout=10)
            finally:
                portal.stop()

    # -- publishing ------------------------------------------------------------------------
    def build_envelope(
        self, task: Task[Any, Any], args: Any, kwargs: dict[str, Any], opts: CallOptions
    ) -> Envelope:
        """Validate arguments and build the message; raises ArgumentsError, publishes nothing."""
        wire_args, wire_kwargs = task.validator.for_wire(args, kwargs)
        return Envelope(
            id=opts.key or new_id(),
            task=task.name,
            args=wire_args,
            kwargs=wire_kwargs,
            enqueued_at=now_iso(),
            expires_at=_expires_at(opts.expires),
            meta=dict(opts.meta),
        )

    async def publish_task(
        self, task: Task[Any, Any], args: Any, kwargs: dict[str, Any], opts: CallOptions
    ) -> TaskHandle:
        envelope = self.build_envelope(task, args, kwargs, opts)
        queue = check_queue(opts.queue or task.queue)
        due = due_time(opts.countdown, opts.eta)
        # no key: the id is fresh, so round robin is safe (a retried publish keeps its subject)
        key = opts.partition_key or opts.key
        if due is not None and due > datetime.now(UTC):
            # a server-side one-shot schedule: no beat process, survives every restart
            envelope = replace(envelope, eta=format_time(due))
            return await publish_delayed(self, envelope, queue, due, key)
        return await self.publish_envelope(envelope, queue, key=key, fresh=key is None)

    async def publish_envelope(
        self,
        envelope: Envelope,
        queue: str,
        msg_id: str | None = None,
        key: str | None = None,
        fresh: bool = False,
    ) -> TaskHandle:
        """Publish a ready envelope to `queue` (requeue and workflows use this too).

        On a partitioned queue `key` picks the partition; without one, the message id does
        (a workflow step or requeue published again lands in the same dedup window), or
        round robin when the id is `fresh` (never published before).
        """
        msg_id = msg_id or envelope.id
        placed_by = key if key is not None else None if fresh else msg_id
        part = await self.place(queue, placed_by)
        subject = self.names.queue_subject(queue, envelope.task, part)
        broker = await self.broker()
        headers = {MSG_ID: msg_id, TASK_HEADER: envelope.task}
        body = envelope.encode()
        with producing(subject, queue, envelope, headers):  # adds traceparent when tracing
            ack = await retry_transient(
                lambda: broker.publish(subject, body, headers), what=f"enqueue of {envelope.task}"
            )
        return TaskHandle(envelope.id, envelope.task, queue, ack.seq, ack.duplicate, self)


def _check_spark_task(name: str, fn: Callable[..., Any], batch: Batching | None) -> None:
    if batch is not None:
        batch.check(name)
    if inspect.iscoroutinefunction(fn):  # it runs in a thread (job) or on executors (items)
        raise ConfigError(f"task {name!r}: a Spark task's function must be a plain def")


def _expires_at(expires: float | timedelta | datetime | None) -> str | None:
    if expires is None:
        return None
    if isinstance(expires, datetime):
        return format_time(expires)
    seconds = expires.total_seconds() if isinstance(expires, timedelta) else float(expires)
    return format_time(datetime.now(UTC) + timedelta(seconds=seconds))
