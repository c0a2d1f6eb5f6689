"""Tasks: a decorated function plus its queue, retry policy and argument validator.

`Task.enqueue` validates arguments against the function's signature with pydantic (built
once per task) and publishes the message; the worker validates again before running.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_type_hints

from pydantic import ConfigDict, ValidationError, create_model

from taskq.batching import Batching
from taskq.errors import ArgumentsError, ConfigError
from taskq.policy import RetryPolicy

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.handle import TaskHandle
    from taskq.workflows import Signature

P = ParamSpec("P")
R = TypeVar("R")

_MODEL_CONFIG = ConfigDict(arbitrary_types_allowed=True, populate_by_name=False)
_JSON_SCALARS = (int, float, str, bool)


class _Defaults:
    """Membership test for defaults that are themselves JSON scalars (or no default)."""

    def __contains__(self, value: object) -> bool:
        return value is inspect.Parameter.empty or value is None or type(value) in _JSON_SCALARS


_JSON_DEFAULTS = _Defaults()


class ArgsValidator:
    """Validates and coerces call arguments against a function signature."""

    def __init__(self, fn: Callable[..., Any], name: str, skip_first: int = 0) -> None:
        self.task = name
        signature = inspect.signature(fn)
        try:
            hints = get_type_hints(fn)
        except Exception:  # unresolvable forward refs: validate loosely rather than fail
            hints = {}
        params = list(signature.parameters.values())[skip_first:]
        self.signature = signature.replace(parameters=params)
        fields: dict[str, Any] = {}
        self._alias: dict[str, str] = {}
        for i, param in enumerate(params):
            annotation = hints.get(param.name, Any)
            key = f"p{i}"
            self._alias[param.name] = key
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                fields[key] = (tuple[annotation, ...], ())  # type: ignore[valid-type]
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                fields[key] = (dict[str, annotation], {})  # type: ignore[valid-type]
            elif param.default is inspect.Parameter.empty:
                fields[key] = (annotation, ...)
            else:
                fields[key] = (annotation, param.default)
        self._model = create_model(f"{fn.__name__}_arguments", __config__=_MODEL_CONFIG, **fields)
        kinds = {p.kind for p in params}
        # "simple" signatures (no */**, no positional-only) bind without inspect, and every
        # parameter can be passed by keyword: the hot path of enqueue and of the worker
        self._simple = kinds <= {
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        }
        self._positional = [
            p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        self._required = [p.name for p in params if p.default is inspect.Parameter.empty]
        # parameters whose validated values are already JSON: no serializing pass needed
        self._json_native = all(
            hints.get(p.name, Any) in _JSON_SCALARS and p.default in _JSON_DEFAULTS
            for p in params
        )

    def _bind(
        self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Any]:
        """Map the call onto parameter names, then validate: (given arguments, model)."""
        given = self._fast_bind(args, kwargs) if self._simple else self._slow_bind(args, kwargs)
        values = {self._alias[name]: value for name, value in given.items()}
        try:
            model = self._model.model_validate(values)
        except ValidationError as exc:
            names = {v: k for k, v in self._alias.items()}
            errors: list[dict[str, Any]] = []
            for error in exc.errors(include_url=False):
                loc = list(error.get("loc", ()))
                if loc and loc[0] in names:
                    loc[0] = names[loc[0]]
                errors.append({**error, "loc": tuple(loc)})
            raise ArgumentsError(self.task, errors) from None
        return given, model

    def _fast_bind(
        self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """`Signature.bind` for signatures without */** or positional-only parameters."""
        if len(args) > len(self._positional):
            raise ArgumentsError(
                self.task,
                f"takes {len(self._positional)} positional argument(s) but {len(args)} were given",
            )
        given = dict(zip(self._positional, args, strict=False))
        for name, value in kwargs.items():
            if name not in self._alias:
                raise ArgumentsError(self.task, f"got an unexpected keyword argument {name!r}")
            if name in given:
                raise ArgumentsError(self.task, f"got multiple values for argument {name!r}")
            given[name] = value
        for name in self._required:
            if name not in given:
                raise ArgumentsError(self.task, f"missing a required argument: {name!r}")
        return given

    def _slow_bind(
        self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            return dict(self.signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise ArgumentsError(self.task, str(exc)) from None

    def for_call(
        self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Validated Python values, ready to call the function with."""
        given, model = self._bind(args, kwargs)
        if self._simple:  # every parameter can be passed by keyword
            return (), {name: getattr(model, self._alias[name]) for name in given}
        bound = self.signature.bind_partial()
        for name in given:
            bound.arguments[name] = getattr(model, self._alias[name])
        return bound.args, bound.kwargs

    def for_wire(
        self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """Validated JSON-ready values, in the caller's positional/keyword shape."""
        given, model = self._bind(args, kwargs)
        dumped = model.__dict__ if self._json_native else model.model_dump(mode="json")
        if self._simple:
            names = list(given)
            values = [dumped[self._alias[name]] for name in names]
            split = min(len(args), len(values))
            return values[:split], dict(zip(names[split:], values[split:], strict=True))
        bound = self.signature.bind_partial()
        for name in given:
            bound.arguments[name] = dumped[self._alias[name]]
        return list(bound.args), dict(bound.kwargs)


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


class Task(Generic[P, R]):
    """A registered task; call `enqueue`/`delay` to run it on a worker, or call it directly."""

    def __init__(
        self,
        app: App,
        fn: Callable[P, Any],
        *,
        name: str,
        queue: str,
        policy: RetryPolicy,
        ack_wait: float,
        timeout: float | None,
        ack_sync: bool,
        executor: str,
        store_result: bool,
        batch: Batching | None = None,
    ) -> None:
        if ack_wait <= 0:
            raise ConfigError(f"task {name!r}: ack_wait must be > 0")
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"task {name!r}: timeout must be > 0 or None")
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.policy = policy
        self.ack_wait = float(ack_wait)
        self.timeout = timeout
        self.ack_sync = ack_sync
        self.executor = executor
        self.store_result = store_result
        # a Spark batch task (executor "spark" with batch options) runs `fn` once per item on
        # the executors; a Spark job task gets the SparkSession as its first argument
        self.batch = batch
        self.is_async = inspect.iscoroutinefunction(fn)
        skip = 1 if executor == "spark" and batch is None else 0
        self.validator = ArgsValidator(fn, name, skip_first=skip)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function here and now, without the queue."""
        return self.fn(*args, **kwargs)

    def options(self, **options: Any) -> TaskCall:
        """A call with options: key, countdown, eta, expires, queue, meta, partition_key."""
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

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature (this task with arguments) for chain, group and chord."""
        from taskq.workflows import Signature

        # not validated here: a chain step's arguments are completed by the previous result
        return Signature(self, tuple(args), dict(kwargs))


@dataclass(frozen=True)
class TaskCall:
    """A task bound to call options; `enqueue`/`delay` publish it."""

    task: Task[Any, Any]
    opts: CallOptions

    def options(self, **options: Any) -> TaskCall:
        return TaskCall(self.task, replace(self.opts, **options))

    async def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        return await self.task.app.publish_task(self.task, args, kwargs, self.opts)

    def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        return self.task.app.portal.run(self.enqueue(*args, **kwargs))

    async def enqueue_many(self, items: Iterable[Any]) -> list[TaskHandle]:
        from taskq.bulk import enqueue_many

        return await enqueue_many(self.task, items, self.opts)
