"""What a url run sends, after its probe: never a field the target refused.

``moeperf run`` against a url target probes it first (suites/serving/probe/probe.py).
Each optional field the target answered with HTTP 400/422 is switched off in the target
spec the run uses, with a note saying which, why, and what it changes in the numbers;
the switch a user would set is named, so the spec can say it next time.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.suites.serving.probe.result import ProbeResult
from moeperf.suites.serving.target_spec import TargetSpec


@dataclass(frozen=True)
class Adapted:
    target: TargetSpec
    notes: tuple[str, ...]


def _said(result: ProbeResult, field: str) -> str:
    check = next(f for f in result.fields if f.field == field)
    return check.detail.split(":", 1)[0] if check.detail else "refused"


def adapt_target(target: TargetSpec, result: ProbeResult) -> Adapted:
    """``target`` with every field the probe found rejected turned off, and the notes."""
    changes: dict[str, object] = {}
    notes: list[str] = []
    rejected = set(result.rejected_fields)

    def turn_off(field: str, key: str, value: object, consequence: str) -> None:
        changes[key] = value
        notes.append(
            f"The probe found the target refuses {field} ({_said(result, field)}): not sent "
            f"(target.{key} = {value!r} for this run; set it in the spec to silence this "
            f"note); {consequence}"
        )

    if target.include_usage and "stream_options" in rejected:
        turn_off(
            "stream_options", "include_usage", False,
            "output tokens come from the tokenizer unless the target sends usage anyway.",
        )  # fmt: skip
    elif target.include_usage and target.continuous_usage and "continuous_usage_stats" in rejected:
        turn_off(
            "continuous_usage_stats", "continuous_usage", False,
            "usage arrives once per request, so tokens per chunk are counted by the client.",
        )  # fmt: skip
    if target.ignore_eos and "ignore_eos" in rejected:
        turn_off(
            "ignore_eos", "ignore_eos", False,
            "a request may end at the model's end-of-sequence token before its max_tokens, "
            "so output lengths are the model's, not the workload's.",
        )  # fmt: skip
    if target.min_tokens is not None and "min_tokens" in rejected:
        turn_off("min_tokens", "min_tokens", None, "outputs may be shorter than min_tokens.")
    return Adapted(target.model_copy(update=changes), tuple(notes))
