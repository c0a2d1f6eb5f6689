"""The history's charts (taskq.operate.history), drawn here as SVG: tasks settled per window
(succeeded, retried, failed, stacked) and run-time percentiles (p50, p95, p99) over the
span. No script and no CDN: the page works offline, read-only, under the CSP (colours come
from classes in dashboard.css, never inline styles). Only numbers reach the markup."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from taskq.records.history import Window

WIDTH, HEIGHT = 1000, 160  # the charts' viewBox; bars and lines scale to it
PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True)
class Charts:
    """What a page shows of a span: the two charts and their labels."""

    throughput: Markup
    runtimes: Markup
    peak: int  # the most tasks settled in one window (the throughput chart's top)
    slowest: float  # the highest p99 of a window, in seconds (the run-time chart's top)
    seconds: int  # one window's length
    first: int  # the span's first window start (epoch seconds)
    end: int  # the span's end
    total: Window  # the span's counts and run times together

    def percentile(self, fraction: float) -> float | None:
        return self.total.percentile(fraction)


def charts(windows: list[Window]) -> Charts:
    total = Window(0, 0)
    for window in windows:
        total.add(window)
    peak = max((_settled(w) for w in windows), default=0)
    slowest = max((w.percentile(0.99) or 0.0 for w in windows), default=0.0)
    length = windows[0].length if windows else 0
    return Charts(
        throughput=_bars(windows, peak),
        runtimes=_lines(windows, slowest),
        peak=peak,
        slowest=slowest,
        seconds=length,
        first=windows[0].start if windows else 0,
        end=windows[-1].start + length if windows else 0,
        total=total,
    )


def _settled(window: Window) -> int:
    return window.succeeded + window.retried + window.failed


def _bars(windows: list[Window], peak: int) -> Markup:
    """One stacked bar per window that settled anything: succeeded at the bottom."""
    step = WIDTH / max(1, len(windows))
    rects: list[str] = []
    for i, window in enumerate(windows):
        base = float(HEIGHT)
        for kind, count in (
            ("ok", window.succeeded),
            ("retry", window.retried),
            ("fail", window.failed),
        ):
            if count and peak:
                height = max(1.0, HEIGHT * count / peak)
                base -= height
                rects.append(
                    f'<rect class="{kind}" x="{i * step:.2f}" y="{base:.2f}" '
                    f'width="{max(step - 0.5, 0.5):.2f}" height="{height:.2f}"/>'
                )
    label = "tasks settled per window: succeeded, retried and failed"
    return _svg("throughput", label, "".join(rects))


def _lines(windows: list[Window], slowest: float) -> Markup:
    """A line per percentile, level across each window (a step), broken where a window
    ran nothing."""
    step = WIDTH / max(1, len(windows))
    paths: list[str] = []
    for name, fraction in PERCENTILES:
        runs: list[list[str]] = [[]]
        for i, window in enumerate(windows):
            value = window.percentile(fraction)
            if value is None or not slowest:
                runs.append([])
                continue
            y = HEIGHT - (HEIGHT - 12) * value / slowest  # the top line clear of the frame
            runs[-1] += [f"{i * step:.2f},{y:.2f}", f"{(i + 1) * step:.2f},{y:.2f}"]
        for points in runs:
            if points:
                paths.append(f'<polyline class="{name}" points="{" ".join(points)}"/>')
    label = "run time percentiles per window: p50, p95 and p99"
    return _svg("runtimes", label, "".join(paths))


def _svg(kind: str, label: str, body: str) -> Markup:
    return Markup(
        f'<svg class="chart {kind}" data-chart="{kind}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'preserveAspectRatio="none" role="img" aria-label="{label}">'
        f'<rect class="frame" width="{WIDTH}" height="{HEIGHT}"/>{body}</svg>'
    )
