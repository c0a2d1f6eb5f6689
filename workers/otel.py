"""Configuring the OpenTelemetry SDK for `taskq worker`: from the standard `OTEL_*` variables,
and a Prometheus scrape target for `--metrics-port`.

Exporters from the environment only when asked: `OTEL_TRACES_EXPORTER` /
`OTEL_METRICS_EXPORTER` (`console`, `otlp`, `none`) or `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
`OTEL_SDK_DISABLED` is not `true`, and the SDK is installed (`pip install 'taskq[otel]'`; OTLP
also needs `opentelemetry-exporter-otlp`). `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
name the worker, as usual.

`--metrics-port PORT` adds the OpenTelemetry Prometheus reader (`taskq[prometheus]`) to the
same MeterProvider and serves `/metrics` on that port: the instruments of `taskq.telemetry`
are the only instrumentation, whichever way their values leave the process.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
from typing import Any

from taskq.errors import TaskqError

log = logging.getLogger("taskq.worker")

PROMETHEUS_NEEDS = ("opentelemetry.sdk", "opentelemetry.exporter.prometheus", "prometheus_client")


class MetricsPortError(TaskqError):
    """`--metrics-port` could not be served (the port is taken, or not ours to bind)."""

    def __init__(self, port: int, reason: str) -> None:
        self.port = port
        self.reason = reason
        super().__init__(f"cannot serve /metrics on port {port}: {reason}")


def prometheus_installed() -> bool:
    """Whether the `prometheus` extra (the SDK and its Prometheus reader) is installed."""
    return all(importlib.util.find_spec(name) is not None for name in PROMETHEUS_NEEDS)


def _choice(name: str) -> str:
    value = os.environ.get(name, "").strip().lower()
    if not value and os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return value


def configure_from_env(metrics_port: int | None = None) -> bool:
    """Install SDK providers if the environment (or `metrics_port`) asks for them; True if
    it did. `metrics_port` serves Prometheus's `/metrics` there (MetricsPortError if not)."""
    traces, measures = _choice("OTEL_TRACES_EXPORTER"), _choice("OTEL_METRICS_EXPORTER")
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        traces = measures = ""  # an explicit --metrics-port still counts
    if traces in ("", "none") and measures in ("", "none") and metrics_port is None:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning("OTEL_* is set but the OpenTelemetry SDK is missing: pip install 'taskq[otel]'")
        return False
    resource = Resource.create()
    if traces not in ("", "none"):
        _install_tracing(resource, traces)
    readers = [] if measures in ("", "none") else _env_readers(measures)
    if metrics_port is not None:
        readers.append(_prometheus_reader(metrics_port))
    if readers:
        _install_metrics(resource, readers)
    return True


def _install_tracing(resource: Any, kind: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = _span_exporter(kind)
    if exporter is None:
        return
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)


def _install_metrics(resource: Any, readers: list[Any]) -> None:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider

    provider = MeterProvider(resource=resource, metric_readers=readers)
    metrics.set_meter_provider(provider)
    atexit.register(provider.shutdown)


def _env_readers(kind: str) -> list[Any]:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    exporter = _metric_exporter(kind)
    return [PeriodicExportingMetricReader(exporter)] if exporter is not None else []


def _prometheus_reader(port: int) -> Any:
    """The Prometheus reader, its `/metrics` served on `port` (every interface: Prometheus
    scrapes from elsewhere) by prometheus_client's server thread, with its process and
    Python collectors beside taskq's."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import start_http_server

    try:
        start_http_server(port)
    except OSError as exc:
        raise MetricsPortError(port, exc.strerror or str(exc)) from None
    log.info("serving Prometheus metrics on :%d/metrics", port)
    return PrometheusMetricReader()


def _span_exporter(kind: str) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("OTEL_TRACES_EXPORTER=%s needs opentelemetry-exporter-otlp", kind)
        return None
    return OTLPSpanExporter()


def _metric_exporter(kind: str) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        log.warning("OTEL_METRICS_EXPORTER=%s needs opentelemetry-exporter-otlp", kind)
        return None
    return OTLPMetricExporter()
