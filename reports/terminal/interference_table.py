"""A prefill-interference run for the terminal: one row per chunked-prefill size."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.interference_rows import interference_rows
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.reports.terminal.cells import ms_cell as _ms


def interference_table(
    summary: InterferenceSummary, scenarios: Mapping[str, ScenarioSummary]
) -> Table:
    table = Table(
        title=(
            f"prefill interference: {summary.decode_streams} decoding streams, "
            f"{summary.prefill_input_tokens}-token prompts arriving at "
            f"{summary.prefill_rate:g}/s (step budget {summary.max_num_batched_tokens} tokens)"
        ),
        caption="ms, with the 95% interval; quiet: the decoders alone; mixed: while the long "
        "prompts arrive; chunked prefill 0: each prompt whole in one step",
    )
    columns = (
        "chunked prefill", "decode ITL p50 quiet", "decode ITL p50 mixed",
        "decode ITL p99 quiet", "decode ITL p99 mixed", "long-prompt TTFT p50",
        "long-prompt TTFT p99",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for row in interference_rows(summary, scenarios):
        table.add_row(
            str(row.chunked_prefill_size),
            _ms(row.quiet_itl_p50_s),
            _ms(row.mixed_itl_p50_s),
            _ms(row.quiet_itl_p99_s),
            _ms(row.mixed_itl_p99_s),
            _ms(row.prefill_ttft_p50_s),
            _ms(row.prefill_ttft_p99_s),
        )
    return table
