"""Template variables: the datasource, then suite -> target -> scenario (or policy), chained.

Each query variable is multi-select with an `All` that means `.*`, so every selector can use
`=~"$name"` whatever is picked.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.models import dashboard as dashboard_m

from moeperf.collectors.export.metric_names import Metric

from .panels import DATASOURCE
from .promql import FILTER_LABELS

# The uid of the datasource that dashboards/provisioning/datasource.yaml creates.
DEFAULT_DATASOURCE_UID = "moeperf-prometheus"


def datasource_variable() -> dashboard_b.DatasourceVariable:
    return (
        dashboard_b.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(dashboard_m.VariableOption(text="Prometheus", value=DEFAULT_DATASOURCE_UID))
    )


def label_variables(source: Metric, labels: tuple[str, ...]) -> list[dashboard_b.QueryVariable]:
    """One variable per label, each listing the values of `source` under the ones before it."""
    unknown = [
        label for label in labels if label not in source.labels or label not in FILTER_LABELS
    ]
    if unknown:
        raise ValueError(f"cannot make variables for {unknown} from {source.name}")
    variables = []
    for i, label in enumerate(labels):
        outer = ", ".join(f'{prev}=~"${prev}"' for prev in labels[:i])
        series = f"{source.sample_name}{{{outer}}}" if outer else source.sample_name
        variables.append(
            dashboard_b.QueryVariable(label)
            .label(label.capitalize())
            .datasource(DATASOURCE)
            .query(f"label_values({series}, {label})")
            .refresh(dashboard_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dashboard_m.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(dashboard_m.VariableOption(text=["All"], value=["$__all"]))
        )
    return variables
