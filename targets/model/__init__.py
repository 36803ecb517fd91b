"""The tiny Mixture-of-Experts decoder shared by the reference serving engine and trainer."""

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import ModelOutput, MoETransformer

__all__ = ["MoEConfig", "MoETransformer", "ModelOutput"]
