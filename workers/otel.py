"""Configuring the OpenTelemetry SDK for `taskq worker` from the standard `OTEL_*` variables.

Only when asked: `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` (`console`, `otlp`, `none`)
or `OTEL_EXPORTER_OTLP_ENDPOINT` is set, `OTEL_SDK_DISABLED` is not `true`, and the SDK is
installed (`pip install 'taskq[otel]'`; OTLP also needs `opentelemetry-exporter-otlp`).
`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the worker, as usual.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

log = logging.getLogger("taskq.worker")


def _choice(name: str) -> str:
    value = os.environ.get(name, "").strip().lower()
    if not value and os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return value


def configure_from_env() -> bool:
    """Install SDK providers if the environment asks for them; True if it did."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    traces, measures = _choice("OTEL_TRACES_EXPORTER"), _choice("OTEL_METRICS_EXPORTER")
    if traces in ("", "none") and measures in ("", "none"):
        return False
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* is set but the OpenTelemetry SDK is missing: pip install 'taskq[otel]'")
        return False
    resource = Resource.create()
    if traces not in ("", "none") and (exporter := _span_exporter(traces)) is not None:
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
        atexit.register(tracer_provider.shutdown)
    if measures not in ("", "none") and (metric_exporter := _metric_exporter(measures)):
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[PeriodicExportingMetricReader(metric_exporter)]
        )
        metrics.set_meter_provider(meter_provider)
        atexit.register(meter_provider.shutdown)
    return True


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
