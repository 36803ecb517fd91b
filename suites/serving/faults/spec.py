"""``[drill]``: the faults a serving run injects into its level, validated at the edge.

A drill runs one load level and injects its faults, in order, at ``at_s`` seconds after
the level starts. Each fault's window (``at_s`` to ``at_s`` + its duration) must end
before the next fault, so every failure and every recovery belongs to one fault.

Kinds, and the targets they need:
- ``kill``: SIGKILL the target's process, start it again ``restart_after_s`` later on the
  same port (an embedded target: synthetic or reference).
- ``stall``: SIGSTOP the process for ``for_s``, then SIGCONT (embedded targets).
- ``http_error``: every generation request is answered ``status`` for ``for_s``;
  ``reset``: every one has its connection reset; ``malformed``: every stream carries an
  event that is not JSON (the synthetic target's drill windows, targets/synthetic/drill.py).
- ``drop_pool``: every load worker closes its connection pool under the requests in
  flight (a NAT or proxy forgetting the client's connections), any target, the asyncio
  engine.
- ``hook``: run a shell ``command`` (``systemctl restart vllm``, ``kubectl delete pod``),
  any target; ``[drill].health_url`` is polled after it until it answers 2xx.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from moeperf.suites.spec_base import Positive, Strict

FaultKind = Literal["kill", "stall", "http_error", "reset", "malformed", "drop_pool", "hook"]
# What each target can be made to do: the process faults need a process the harness
# started; the windows need the synthetic target's drill control.
PROCESS_FAULTS = ("kill", "stall")
WINDOW_FAULTS = ("http_error", "reset", "malformed")
FAULTS_BY_TARGET = {
    "synthetic": (*PROCESS_FAULTS, *WINDOW_FAULTS, "drop_pool", "hook"),
    "reference": (*PROCESS_FAULTS, "drop_pool", "hook"),
    "url": ("drop_pool", "hook"),
}


class FaultSpec(Strict):
    # kill, stall (embedded targets); http_error, reset, malformed (synthetic target);
    # drop_pool (asyncio engine); hook (any target). Module docstring: what each does.
    kind: FaultKind
    # When the fault starts, in seconds after the level starts.
    at_s: Annotated[float, Field(ge=0)]
    # stall, http_error, reset, malformed: how long the fault lasts.
    for_s: Positive | None = None
    # kill: how long the target stays dead before it is started again.
    restart_after_s: Annotated[float, Field(ge=0)] = 0.0
    # http_error: the status every request gets (429 as a rate limiter, 5xx as an engine).
    status: Literal[429, 500, 502, 503, 504] = 503
    # hook: the shell command to run.
    command: str = ""
    # hook: a command still running after this long fails the injection.
    hook_timeout_s: Positive = 300.0

    @model_validator(mode="after")
    def _fields_of_kind(self) -> FaultSpec:
        if self.kind in ("stall", *WINDOW_FAULTS) and self.for_s is None:
            raise ValueError(f"a {self.kind} fault needs for_s (how long it lasts, seconds)")
        if self.kind not in ("stall", *WINDOW_FAULTS) and self.for_s is not None:
            raise ValueError(
                f"for_s is for stall, http_error, reset and malformed faults, not {self.kind}"
            )
        if self.kind == "hook" and not self.command.strip():
            raise ValueError("a hook fault needs command (the shell command to run)")
        if self.kind != "hook" and self.command:
            raise ValueError(f"command is for hook faults, not {self.kind}")
        if self.kind != "kill" and "restart_after_s" in self.model_fields_set:
            raise ValueError(f"restart_after_s is for kill faults, not {self.kind}")
        if self.kind != "http_error" and "status" in self.model_fields_set:
            raise ValueError(f"status is for http_error faults, not {self.kind}")
        return self

    @property
    def planned_s(self) -> float:
        """How long the fault itself is planned to last (a hook's is its own run time)."""
        if self.kind == "kill":
            return self.restart_after_s
        return self.for_s or 0.0


class DrillSpec(Strict):
    # The faults, in time order, each starting after the one before has ended.
    faults: Annotated[list[FaultSpec], Field(min_length=1, max_length=64)]
    # Polled after a hook (and after a restart) until it answers 2xx; default: the
    # target's /health (url targets: give it; a hook may restart something else).
    health_url: str = ""
    # How long health_url has to answer 2xx before the injection fails.
    health_timeout_s: Positive = 120.0
    # Latency before a fault and after its recovery: requests sent in this window.
    compare_window_s: Positive = 2.0

    @model_validator(mode="after")
    def _in_order(self) -> DrillSpec:
        for i, (fault, after) in enumerate(zip(self.faults, self.faults[1:], strict=False)):
            if after.at_s < fault.at_s + fault.planned_s:
                raise ValueError(
                    f"faults[{i + 1}] starts at {after.at_s:g} s, before faults[{i}] "
                    f"({fault.kind} at {fault.at_s:g} s for {fault.planned_s:g} s) ends: give "
                    "the faults in time order, each after the one before has ended"
                )
        return self

    def check_target(self, target_kind: str) -> list[str]:
        """Problems with driving these faults against a target of ``target_kind``."""
        valid = FAULTS_BY_TARGET[target_kind]
        return [
            f"drill.faults[{i}]: kind {f.kind!r} cannot be injected into a {target_kind} "
            f"target; valid kinds there: {', '.join(valid)}"
            for i, f in enumerate(self.faults)
            if f.kind not in valid
        ]
