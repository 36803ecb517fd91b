"""``RunSummary``: any suite's summary record, the type summary.json holds (for annotations:
which record a file holds is told by its ``suite`` tag, through the suite registry)."""

from __future__ import annotations

from moeperf.collectors.accuracy_records import AccuracySummary
from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.micro_summary import MicroSummary
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.collectors.training_summary import TrainingSummary

RunSummary = (
    ServingSummary | TrainingSummary | DistTrainingSummary | MicroSummary | AccuracySummary
    | SimulationSummary
)  # fmt: skip
