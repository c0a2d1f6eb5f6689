"""Validating a task's call arguments against its function's signature with pydantic.

The validator is built once per task. Producers validate before publishing (`for_wire`:
JSON-ready values); the worker validates again before running (`for_call`: Python values).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import PydanticSerializationError

from taskq.errors import ArgumentsError

# `ser_json_inf_nan`: a nan/inf argument stays a float in its JSON form (pydantic's default
# makes it None), so the envelope's encoder refuses it, naming it (taskq.records.finite)
_MODEL_CONFIG = ConfigDict(
    arbitrary_types_allowed=True, populate_by_name=False, ser_json_inf_nan="constants"
)
_JSON_SCALARS = (int, float, str, bool)
POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
SHAPES_KEPT = 8  # bulk enqueue validators kept per task, one per shape of call


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
            hints = get_type_hints(fn, include_extras=True)  # keep Annotated constraints
        except Exception:  # unresolvable forward refs: validate loosely rather than fail
            hints = {}
        params = list(signature.parameters.values())[skip_first:]
        self.signature = signature.replace(parameters=params)
        fields: dict[str, Any] = {}
        self._alias: dict[str, str] = {}
        self._hints: dict[str, Any] = {}  # as annotated (Annotated constraints kept)
        for i, param in enumerate(params):
            annotation = self._hints[param.name] = hints.get(param.name, Any)
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
        self._simple = kinds <= {POSITIONAL_OR_KEYWORD, KEYWORD_ONLY}
        self._positional = [p.name for p in params if p.kind is POSITIONAL_OR_KEYWORD]
        self._required = [p.name for p in params if p.default is inspect.Parameter.empty]
        # parameters whose validated values are already JSON: no serializing pass needed
        self._json_native = all(
            hints.get(p.name, Any) in _JSON_SCALARS and p.default in _JSON_DEFAULTS for p in params
        )
        self._shapes: dict[tuple[str, ...], TypeAdapter[list[Any]]] = {}  # by bulk enqueues

    def _dumped(self, model: Any) -> dict[str, Any]:
        try:
            return dict(model.model_dump(mode="json"))
        except PydanticSerializationError as exc:  # validated, yet with no JSON form
            raise ArgumentsError(self.task, f"cannot be sent as JSON: {exc}") from None

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
        dumped = model.__dict__ if self._json_native else self._dumped(model)
        if self._simple:
            names = list(given)
            values = [dumped[self._alias[name]] for name in names]
            split = min(len(args), len(values))
            return values[:split], dict(zip(names[split:], values[split:], strict=True))
        bound = self.signature.bind_partial()
        for name in given:
            bound.arguments[name] = dumped[self._alias[name]]
        return list(bound.args), dict(bound.kwargs)

    def for_wire_many(
        self, calls: list[tuple[list[Any], dict[str, Any]]]
    ) -> list[tuple[list[Any], dict[str, Any]]]:
        """`for_wire` for a bulk enqueue's calls. Calls of one shape (a simple signature, the
        same number of positional arguments and the same keywords in each) are bound once
        and validated in one pass of pydantic-core, as tuples of values (no model built per
        call); any other batch, or one a value fails in, goes call by call, so an error is
        the one `for_wire` raises for it."""
        shapes = {(len(args), tuple(kwargs)) for args, kwargs in calls}
        if not self._simple or len(shapes) != 1:
            return [self.for_wire(args, kwargs) for args, kwargs in calls]
        names = tuple(self._fast_bind(*calls[0]))  # the shape's errors, raised for all
        rows = self._rows(names)
        try:
            values = rows.validate_python([(*args, *kwargs.values()) for args, kwargs in calls])
            if not self._json_native:
                values = rows.dump_python(values, mode="json")
        except (ValidationError, PydanticSerializationError):
            return [self.for_wire(args, kwargs) for args, kwargs in calls]
        split = min(len(calls[0][0]), len(names))
        keys = names[split:]
        return [(list(row[:split]), dict(zip(keys, row[split:], strict=True))) for row in values]

    def _rows(self, names: tuple[str, ...]) -> TypeAdapter[list[Any]]:
        """The validator of calls that give `names`, each a tuple of their values; a few
        shapes kept per task."""
        rows = self._shapes.get(names)
        if rows is None:
            if len(self._shapes) >= SHAPES_KEPT:
                self._shapes.clear()
            row = tuple.__class_getitem__(tuple(self._hints[name] for name in names))
            rows = self._shapes[names] = TypeAdapter(list[row], config=_MODEL_CONFIG)  # type: ignore[valid-type]
        return rows
