"""Tasks: a decorated function plus its queue, retry policy and argument validator.

`Task.enqueue` validates arguments against the function's signature (built once per task),
runs the app's enqueue middleware and publishes the message; the worker validates again
before running.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar

from taskq import sites
from taskq.arguments import ArgsValidator
from taskq.batching import Batching
from taskq.bulk import Where, enqueue_all, from_template, split
from taskq.client import ClientSource, Published
from taskq.clock import Clock
from taskq.errors import ConfigError, TaskqError
from taskq.flowcontrol import gates
from taskq.flowcontrol.gates import Gate
from taskq.flowcontrol.options import DEFAULT_PRIORITY, KeySource, check_priority, flow_limits
from taskq.handle import TaskHandle
from taskq.ids import check_key, new_id
from taskq.middleware import Chain
from taskq.policy import DEFAULT_ACK_WAIT, RetryPolicy
from taskq.portal import Portal
from taskq.records.clock import format_time, now_iso
from taskq.records.envelope import Envelope
from taskq.records.schedules import due_time
from taskq.settings import Settings
from taskq.topology.names import check_queue

P = ParamSpec("P")
R = TypeVar("R")


class Producer(ClientSource, Protocol):
    """What a task needs of its App: the loop's Client, the portal, the middleware."""

    @property
    def portal(self) -> Portal: ...

    @property
    def middleware(self) -> Chain: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> Settings: ...


@dataclass(frozen=True)
class CallOptions:
    """Per-call options set with `task.options(...)`."""

    key: str | None = None
    countdown: float | None = None
    eta: datetime | None = None
    expires: float | timedelta | datetime | None = None
    queue: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    partition_key: str | None = None  # same key, same partition (partitioned queues)
    # flow control at enqueue (taskq.flowcontrol.gates); with one of them, `key` names the
    # group it applies to and each run gets its own id
    unique_for: float | None = None
    debounce: float | None = None
    throttle: float | None = None
    priority: int | None = None  # 0-9, higher first (None: the task's own)
    site: str | None = None  # an edge site's name: sent there from the hub (taskq.sites)

    def __post_init__(self) -> None:
        if self.key is not None:
            check_key(self.key)
        if self.partition_key is not None:
            check_key(self.partition_key, "partition_key")
        if self.priority is not None:
            check_priority("(call)", self.priority)
        gate = self.gate  # validates (ConfigError)
        if gate.debounce is not None and (self.countdown is not None or self.eta is not None):
            raise ConfigError("debounce= is a delay itself: drop countdown= / eta=")

    @property
    def gate(self) -> Gate:
        return Gate(self.unique_for, self.debounce, self.throttle, self.key)


@dataclass(frozen=True)
class TaskSpec:
    """How a task runs: its queue, retries, lease and limits (set at declaration)."""

    name: str
    queue: str = "default"
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    ack_wait: float = DEFAULT_ACK_WAIT
    timeout: float | None = None
    ack_sync: bool = False
    executor: str = "default"
    store_result: bool = True
    batch: Batching | None = None
    # flow control (taskq.flowcontrol.options; docs/flow-control.md)
    priority: int = DEFAULT_PRIORITY
    max_concurrency: int | None = None
    concurrency_key: KeySource | None = None
    max_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_key: KeySource | None = None
    # options a middleware declared it accepts (taskq.middleware: `task_options`)
    middleware_options: Mapping[str, Any] = field(default_factory=dict)


class Task(Generic[P, R]):
    """A registered task; call `enqueue`/`delay` to run it on a worker, or call it directly."""

    def __init__(self, app: Producer, fn: Callable[P, Any], spec: TaskSpec) -> None:
        if spec.ack_wait <= 0:
            raise ConfigError(f"task {spec.name!r}: ack_wait must be > 0")
        if spec.timeout is not None and spec.timeout <= 0:
            raise ConfigError(f"task {spec.name!r}: timeout must be > 0 or None")
        self.app = app
        self.fn = fn
        self.name, self.queue, self.policy = spec.name, spec.queue, spec.policy
        self.ack_wait, self.timeout, self.ack_sync = (
            float(spec.ack_wait),
            spec.timeout,
            spec.ack_sync,
        )
        self.executor, self.store_result = spec.executor, spec.store_result
        # a Spark batch task (executor "spark" with batch options) runs `fn` once per item on
        # the executors; a Spark job task gets the SparkSession as its first argument
        self.batch = spec.batch
        self.is_async = inspect.iscoroutinefunction(fn)
        skip = 1 if spec.executor == "spark" and spec.batch is None else 0
        self.validator = ArgsValidator(fn, spec.name, skip_first=skip)
        # None for a task without limits: the worker's whole check is `task.limits is None`
        self.limits = flow_limits(
            spec.name, self.validator.signature, self.ack_wait, _flow_options(spec)
        )
        self.lane = self.limits is not None and self.limits.lane  # published to its own lane
        self.priority = check_priority(spec.name, spec.priority)
        self.middleware_options = spec.middleware_options
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", spec.name)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function here and now, without the queue."""
        return self.fn(*args, **kwargs)

    def options(self, **options: Any) -> TaskCall:
        """A call with options: key, countdown, eta, expires, queue, meta, partition_key,
        unique_for, debounce, throttle (see docs/flow-control.md)."""
        try:
            return TaskCall(self, CallOptions(**options))
        except TypeError as exc:
            raise ConfigError(f"task {self.name!r}: {exc}") from None

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Publish a run of this task; returns once the server has stored it."""
        return await TaskCall(self, CallOptions()).enqueue(*args, **kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """`enqueue` for synchronous code."""
        return TaskCall(self, CallOptions()).delay(*args, **kwargs)

    async def enqueue_many(self, items: Iterable[Any]) -> list[TaskHandle]:
        """Enqueue many runs, pipelined; each item is an args list, a kwargs dict or a value."""
        return await TaskCall(self, CallOptions()).enqueue_many(items)

    def enqueue_in(self, db: Any, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Write a run into the outbox inside `db`'s transaction (a SQLAlchemy Connection or
        Session, or a Django connection): published by a relay once it commits, never if
        it rolls back (docs/outbox.md)."""
        return TaskCall(self, CallOptions()).enqueue_in(db, *args, **kwargs)

    async def enqueue_in_async(self, db: Any, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """`enqueue_in` through a SQLAlchemy AsyncConnection or AsyncSession."""
        return await TaskCall(self, CallOptions()).enqueue_in_async(db, *args, **kwargs)

    def level(self, priority: int | None) -> int:
        """The priority level of a call (`priority` None: the task's own)."""
        if priority is None or priority == self.priority:
            return self.priority
        if self.lane:
            raise ConfigError(
                f"task {self.name!r} has max_concurrency: its lane's priority is the one "
                f"declared ({self.priority}), not {priority} per call"
            )
        return priority

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature (this task with arguments) for chain, group and chord."""
        # not validated here: a chain step's arguments are completed by the previous result
        return Signature(self, tuple(args), dict(kwargs))

    def apply_async(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Celery's spelling: raises a ConfigError naming taskq's."""
        raise ConfigError(
            "apply_async is Celery's: in taskq, "
            "`await task.options(countdown=..., eta=..., queue=..., priority=..., key=...)"
            ".enqueue(*args)` (or `.enqueue_sync`) (docs/from-celery.md)"
        )

    def si(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Celery's immutable signature: raises a ConfigError naming what taskq has."""
        raise ConfigError(
            ".si() is Celery's: taskq has no immutable signatures; a chain step gets the "
            "previous result first (task.s(...)), a group's members run apart "
            "(docs/from-celery.md)"
        )

    def build_envelope(self, args: Any, kwargs: dict[str, Any], opts: CallOptions) -> Envelope:
        """Validate arguments and build the message; raises ArgumentsError, publishes nothing."""
        wire_args, wire_kwargs = self.validator.for_wire(args, kwargs)
        return self.stamp(opts, opts.key or new_id(), wire_args, wire_kwargs)

    def stamp(
        self, opts: CallOptions, task_id: str, args: list[Any], kwargs: dict[str, Any]
    ) -> Envelope:
        """The message of a call with `opts`, stamped now; with no id and no arguments, a
        bulk enqueue's template (`taskq.bulk.from_template` gives each message its own)."""
        clock = self.app.clock
        return Envelope(
            id=task_id,
            task=self.name,
            args=args,
            kwargs=kwargs,
            enqueued_at=now_iso(),
            expires_at=_expires_at(opts.expires, clock),
            eta=_eta(opts.countdown, opts.eta, clock),
            meta=dict(opts.meta),
        )

    async def send(
        self,
        envelope: Envelope,
        queue: str,
        *,
        key: str | None = None,
        fresh: bool = False,
        priority: int | None = None,
    ) -> TaskHandle:
        """Place `envelope` in `queue`, run the enqueue middleware, publish it. A partition
        is picked by `key`, else the id (`fresh`: round robin); `priority` (None: the
        task's) picks the level's subject. A future `eta` in the envelope makes the first
        worker to see it store it as a schedule (taskq.records.schedules)."""
        client = await self.app.client()
        part = await client.place_message(queue, envelope.id, key, fresh)
        sent: list[Published] = []

        async def publish(final: Envelope) -> None:
            sent.append(await client.publish_placed(final))

        placed = client.placed(envelope, queue, part, self.lane, self.level(priority))
        await self.app.middleware.enqueue(placed, publish)
        return TaskHandle.of(_one(sent, envelope), self.app)


@dataclass(frozen=True)
class TaskCall:
    """A task bound to call options; `enqueue`/`delay` publish it."""

    task: Task[Any, Any]
    opts: CallOptions

    def options(self, **options: Any) -> TaskCall:
        return TaskCall(self.task, replace(self.opts, **options))

    async def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        opts = self.opts
        if opts.site is not None:
            return await sites.enqueue(self, args, kwargs)
        if opts.unique_for is not None or opts.debounce is not None or opts.throttle is not None:
            return await self._gated(args, kwargs)
        envelope = self.task.build_envelope(args, kwargs, opts)
        queue = check_queue(opts.queue or self.task.queue)
        # no key: the id is fresh, so round robin is safe (a retried publish keeps its subject)
        key = opts.partition_key or opts.key
        return await self.task.send(
            envelope, queue, key=key, fresh=key is None, priority=opts.priority
        )

    async def _gated(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        """An enqueue through unique_for, debounce or throttle (taskq.flowcontrol.gates)."""
        opts, task = self.opts, self.task
        envelope = replace(task.build_envelope(args, kwargs, opts), id=new_id())
        envelope.encode()  # what the encoder refuses (a nan argument), before a gate's record
        queue = check_queue(opts.queue or task.queue)
        gate = opts.gate
        if gate.debounce is not None:
            return await gates.debounce(
                task.app,
                envelope,
                queue,
                gate,
                opts.partition_key,
                task.lane,
                task.level(opts.priority),
            )

        async def send(final: Envelope) -> TaskHandle:
            # placed by its id (or partition key), never round robin: a second publish of
            # the same id must meet the first in its stream's dedup window
            return await task.send(final, queue, key=opts.partition_key, priority=opts.priority)

        if gate.unique_for is not None:
            return await gates.unique(task.app, envelope, queue, gate, send)
        return await gates.throttle(task.app, envelope, queue, gate, send)

    def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        return self.task.app.portal.run(self.enqueue(*args, **kwargs))

    def enqueue_in(self, db: Any, *args: Any, **kwargs: Any) -> TaskHandle:
        from taskq.outbox import load  # SQLAlchemy loads with the first outbox call

        handle: TaskHandle = load("rows").write(db, self, args, kwargs)
        return handle

    async def enqueue_in_async(self, db: Any, *args: Any, **kwargs: Any) -> TaskHandle:
        from taskq.outbox import load

        handle: TaskHandle = await load("rows").write_async(db, self, args, kwargs)
        return handle

    async def enqueue_many(self, items: Iterable[Any]) -> list[TaskHandle]:
        """Validate every item first (a bad one publishes nothing), run each through the
        enqueue middleware, then publish them all pipelined; handles come back in order."""
        if self.opts.key is not None or self.opts.gate.active:
            raise ConfigError("enqueue_many takes no key, unique_for, debounce or throttle")
        calls = [split(item) for item in items]
        if self.opts.site is not None:
            return await sites.enqueue_many(self, calls)
        task, opts, app = self.task, self.opts, self.task.app
        # one template: validated in one pass, stamped once, an id each (taskq.bulk)
        envelopes = from_template(task.stamp(opts, "", [], {}), task.validator.for_wire_many(calls))
        queue = check_queue(opts.queue or task.queue)
        where = Where(queue, task.lane, task.level(opts.priority), opts.partition_key)
        sent = await enqueue_all(await app.client(), app.middleware, envelopes, where)
        if sent is None:
            raise _dropped(task.name)
        return [TaskHandle.of(p, app) for p in sent]


@dataclass(frozen=True)
class Signature:
    """A task with arguments, not yet enqueued: `task.s(*args, **kwargs)`."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __or__(self, other: object) -> NoReturn:
        raise ConfigError(
            "`a.s() | b.s()` is Celery's: in taskq, `await chain(a.s(), b.s()).enqueue()` "
            "(docs/from-celery.md)"
        )


_FLOW = ("max_concurrency", "concurrency_key", "max_per_key", "rate_limit", "rate_limit_key")


def _flow_options(spec: TaskSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in _FLOW}


def _one(sent: list[Published], envelope: Envelope) -> Published:
    if len(sent) != 1:
        raise _dropped(envelope.task)
    return sent[0]


def _dropped(task: str) -> TaskqError:
    return TaskqError(
        f"an enqueue middleware did not call call_next exactly once: {task} was not enqueued"
    )


def _expires_at(expires: float | timedelta | datetime | None, clock: Clock) -> str | None:
    if expires is None:
        return None
    if isinstance(expires, datetime):
        return format_time(expires)
    seconds = expires.total_seconds() if isinstance(expires, timedelta) else float(expires)
    return format_time(clock.now() + timedelta(seconds=seconds))


def _eta(countdown: float | None, eta: datetime | None, clock: Clock) -> str | None:
    """The envelope's `eta`: when a delayed call is due (None: now, or already past)."""
    if countdown is None and eta is None:
        return None  # the common call: no clock read
    now = clock.now()
    due = due_time(countdown, eta, now)
    return format_time(due) if due is not None and due > now else None
