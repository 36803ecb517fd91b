import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from moeperf.collectors.export.bulk_histogram import BulkHistogram

BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.1, 1.0)


def test_exposition_matches_prometheus_client_histogram_for_the_same_samples():
    samples = np.random.default_rng(3).exponential(0.01, size=5000)
    samples[:3] = [0.001, 0.002, 5.0]  # on a bound, on a bound, past the last one
    reference_registry, bulk_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(
        "x_seconds", "h", ["scenario"], buckets=BUCKETS, registry=reference_registry
    )
    bulk = BulkHistogram("x_seconds", "h", ["scenario"], BUCKETS, registry=bulk_registry)
    for s in samples:
        reference.labels("a").observe(s)
    bulk.observe_many(("a",), samples[:1000])
    bulk.observe_many(("a",), samples[1000:])
    bulk.observe_many(("a",), np.empty(0))

    def lines(registry, kind):
        text = generate_latest(registry).decode().splitlines()
        return [line for line in text if "_created" not in line and ("_sum" in line) == kind]

    # Buckets, counts, HELP and TYPE identical; sums equal up to float summation order.
    assert lines(bulk_registry, False) == lines(reference_registry, False)
    (bulk_sum,), (reference_sum,) = lines(bulk_registry, True), lines(reference_registry, True)
    assert float(bulk_sum.split()[-1]) == pytest.approx(float(reference_sum.split()[-1]))


def test_wrong_label_count_is_refused():
    bulk = BulkHistogram("y_seconds", "h", ["a", "b"], BUCKETS)
    with pytest.raises(ValueError, match="expected labels"):
        bulk.observe_many(("only-one",), np.ones(2))
