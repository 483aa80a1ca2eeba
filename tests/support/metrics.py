"""What the metrics tests share: the OpenTelemetry SDK's in-memory reader on a provider
lifecycles records through, and the data points it collected, by metric name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from lifecycles import observe


@contextmanager
def recording() -> Iterator[InMemoryMetricReader]:
    """An in-memory reader lifecycles' metrics are recorded to until the block ends."""
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    observe.use_meter_provider(provider)
    try:
        yield found
    finally:
        observe.use_meter_provider(None)
        provider.shutdown()


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every metric collected, by name: (attributes, the data point) pairs."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(
                    (dict(point.attributes or {}), point) for point in metric.data.data_points)
    return found
