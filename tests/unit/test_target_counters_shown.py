"""The target's counters and the token-count cross-check as the terminal and the report
show them: every number present, "not available from this target" where it is absent."""

from __future__ import annotations

import dataclasses

from moeperf.collectors.serving_records import TokenDiscrepancy, empty_scenario
from moeperf.collectors.target_counters import NOT_AVAILABLE, TargetCounters
from moeperf.reports.render import table_html
from moeperf.reports.target_counters import target_counters_table
from moeperf.reports.terminal.levels import target_counters_line, throughput_line, token_count_text
from moeperf.suites.serving.workload.tokenizer import HFTokenizer
from moeperf.targets.model.checkpoint import default_model_dir

REFERENCE = TargetCounters(
    dialect="reference",
    gauge_scrapes=3,
    spec_drafts=100,
    spec_draft_tokens=200,
    spec_accepted_tokens=90,
    spec_acceptance_ratio=0.45,
    spec_acceptance_by_position=(0.6, 0.3),
    spec_tokens_per_step=1.9,
    engine_steps=50,
    generation_tokens=190,
    generation_tokens_per_engine_step=3.8,
    kv_usage_mean_ratio=0.12,
    kv_usage_max_ratio=0.2,
    preemptions=0,
    prefix_cache_queries=1000,
    prefix_cache_hits=250,
    prefix_cache_hit_ratio=0.25,
)
SYNTHETIC = TargetCounters(dialect="synthetic", gauge_scrapes=3, generation_tokens=640)


def entry(counters: TargetCounters | None):
    return dataclasses.replace(empty_scenario(), target_counters=counters)


def test_the_line_of_a_reference_level_has_every_counter():
    line = target_counters_line("c=4", entry(REFERENCE))
    assert line.startswith("c=4 target (reference): ")
    for text in (
        "1.90 tokens/verify step",
        "acceptance 0.45",
        "by position 0.60 / 0.30",
        "3.8 tokens/engine step",
        "KV cache mean 12% max 20%",
        "preemptions 0",
        "prefix-cache hit rate 0.25",
    ):
        assert text in line
    assert NOT_AVAILABLE not in line


def test_the_line_of_a_target_without_them_says_not_available():
    line = target_counters_line("c=4", entry(SYNTHETIC))
    assert line == (
        f"c=4 target (synthetic): MTP, KV cache, preemptions, prefix cache: {NOT_AVAILABLE}"
    )
    assert "not scraped" in target_counters_line("c=4", entry(None))
    mtp_off = dataclasses.replace(REFERENCE, spec_drafts=0, spec_tokens_per_step=None)
    assert "MTP: no drafts (off)" in target_counters_line("c=1", entry(mtp_off))


def test_the_report_table_has_a_row_per_level_and_says_what_is_absent():
    scenarios = {"c=1": entry(REFERENCE), "c=4": entry(SYNTHETIC), "c=16": entry(None)}
    table = target_counters_table(scenarios)
    assert table is not None and table.caption.startswith("Target counters")
    rows = table.frame.set_index("scenario")
    assert rows.loc["c=1", "MTP tokens/verify step"] == 1.9
    assert rows.loc["c=1", "acceptance by position"] == "0.600 / 0.300"
    assert rows.loc["c=1", "prefix-cache hit rate"] == 0.25
    assert rows.loc["c=1", "KV usage max (0-1)"] == 0.2
    assert rows.loc["c=4", "MTP acceptance"] == NOT_AVAILABLE
    assert rows.loc["c=4", "preemptions"] == NOT_AVAILABLE
    assert rows.loc["c=16", "dialect"] == "not scraped"
    html = table_html(table)
    assert NOT_AVAILABLE in html and "0.600 / 0.300" in html
    assert target_counters_table({}) is None


def test_the_token_count_line_says_which_way_and_why():
    fewer = TokenDiscrepancy(58, 15, -1.2, client_fewer=15, client_more=0)
    text = token_count_text(fewer)
    assert text.startswith("client count of the re-tokenized text differs from server usage")
    assert "15 of 58 (15 fewer, 0 more, mean -1.2 tokens" in text
    assert "re-encoding merges some generated tokens" in text
    more = TokenDiscrepancy(10, 1, 0.1, client_fewer=0, client_more=1)
    assert "usage undercounts" in token_count_text(more)
    assert "equals server usage in all 10" in token_count_text(TokenDiscrepancy(10, 0, 0.0, 0, 0))
    old = TokenDiscrepancy(10, 2, -0.4)  # a summary written before the split
    assert token_count_text(old).endswith("in 2 of 10")
    scenario = dataclasses.replace(empty_scenario(), output_token_discrepancy=fewer)
    assert "15 fewer" in throughput_line("c=4", scenario)


def test_generated_newlines_re_encode_merged_in_the_shipped_tokenizer():
    """Why the client's count of the default bench is lower than the server's: the tiny
    model emits "\\n" one token at a time, and its tokenizer encodes "\\n\\n" as one token."""
    tokenizer = HFTokenizer.from_dir(default_model_dir())
    newline = tokenizer.count("\n")
    assert newline == 1
    generated = "\n" * 40  # 40 generated tokens, each one "\n"
    assert tokenizer.count(generated) == 20
