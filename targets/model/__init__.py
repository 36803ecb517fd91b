"""The tiny Mixture-of-Experts decoder shared by the reference serving engine and trainer."""

from targets.model.config import MoEConfig
from targets.model.model import ModelOutput, MoETransformer

__all__ = ["MoEConfig", "MoETransformer", "ModelOutput"]
