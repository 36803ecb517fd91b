"""What every spec model shares: strict (unknown fields refused), frozen, and the number types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Unknown fields are refused (a typo names itself); a validated spec never changes; TOML's
# inf and nan are no number a spec means (an infinite level or duration never ends).
STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Strict(BaseModel):
    model_config = STRICT


Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
