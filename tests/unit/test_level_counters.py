"""The reference target's counters over a level: parsed from its exposition, differenced,
and turned into accepted tokens per step, acceptance per position and hit ratios."""

from __future__ import annotations

from suites.serving.observe.level_counters import LevelCounters, parse_counters


def exposition(steps, drafts, draft_tokens, accepted, per_position, hits, queries) -> str:
    lines = [
        "# TYPE reference_steps_total counter",
        f"reference_steps_total {steps}",
        "# TYPE reference_generation_tokens_total counter",
        f"reference_generation_tokens_total {steps * 3}",
        "# TYPE reference_spec_decode_num_drafts_total counter",
        f"reference_spec_decode_num_drafts_total {drafts}",
        "# TYPE reference_spec_decode_draft_tokens_total counter",
        f"reference_spec_decode_draft_tokens_total {draft_tokens}",
        "# TYPE reference_spec_decode_accepted_tokens_total counter",
        f"reference_spec_decode_accepted_tokens_total {accepted}",
        "# TYPE reference_spec_decode_accepted_tokens_per_position_total counter",
        *(
            f'reference_spec_decode_accepted_tokens_per_position_total{{position="{i}"}} {n}'
            for i, n in enumerate(per_position)
        ),
        "# TYPE reference_prefix_cache_hits_total counter",
        f"reference_prefix_cache_hits_total {hits}",
        "# TYPE reference_prefix_cache_queries_total counter",
        f"reference_prefix_cache_queries_total {queries}",
        "# TYPE reference_requests_running gauge",
        "reference_requests_running 4",
    ]
    return "\n".join(lines) + "\n"


def test_parse_keeps_counters_only_with_their_labels():
    values = parse_counters(exposition(10, 4, 8, 5, [3, 2], 0, 0))
    assert values[("reference_steps_total", ())] == 10
    key = ("reference_spec_decode_accepted_tokens_per_position_total", (("position", "1"),))
    assert values[key] == 2
    assert not any(name.startswith("reference_requests_running") for name, _ in values)


def test_increases_and_what_is_derived_from_them():
    before = parse_counters(exposition(100, 40, 80, 50, [30, 20], 64, 512))
    after = parse_counters(exposition(200, 140, 280, 200, [90, 60, 50], 1000, 2048))
    c = LevelCounters.between(before, after)
    assert (c.steps, c.drafts, c.draft_tokens, c.accepted_tokens) == (100, 100, 200, 150)
    # A position seen only after the level began counts from zero.
    assert c.accepted_by_position == (60, 40, 50)
    assert c.accepted_tokens_per_step == 2.5
    assert c.acceptance_by_position == (0.6, 0.4, 0.5)
    assert c.draft_acceptance_ratio == 0.75
    assert c.prefix_cache_hit_ratio == (1000 - 64) / (2048 - 512)
    assert c.generation_tokens_per_step == 3.0


def test_without_drafts_or_lookups_nothing_is_invented():
    same = parse_counters(exposition(5, 0, 0, 0, [], 0, 0))
    c = LevelCounters.between(same, same)
    assert c.accepted_tokens_per_step is None
    assert c.acceptance_by_position == ()
    assert c.prefix_cache_hit_ratio is None and c.generation_tokens_per_step is None
