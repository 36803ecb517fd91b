"""Request traces: reading both formats, prompts with the trace's prefix sharing, the generator
and the shipped small trace."""

import asyncio
import json
import math
import os
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from moeperf.collectors.errors import MoeperfUsageError
from moeperf.suites.serving.embedded.reference import default_model_dir
from moeperf.suites.serving.workload import make_trace
from moeperf.suites.serving.workload.sources import Prompt, WorkloadError
from moeperf.suites.serving.workload.tokenizer import HFTokenizer
from moeperf.suites.serving.workload.trace import Trace, TraceRequest, read_trace, trace_prompts

SHIPPED = Path(make_trace.__file__).parents[2] / "specs" / "traces" / "small-mooncake.jsonl"
SHIPPED_BLOCK_TOKENS = 64


@pytest.fixture(scope="module")
def hf(tiny_bpe_dir: Path) -> HFTokenizer:
    return HFTokenizer.from_dir(tiny_bpe_dir)


@pytest.fixture(scope="module")
def ref() -> HFTokenizer:
    """The reference target's own tokenizer (4,096 tokens)."""
    return HFTokenizer.from_dir(default_model_dir())


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def mooncake(ts_ms: int, n_in: int, n_out: int, hash_ids: list[object]) -> dict[str, object]:
    return {"timestamp": ts_ms, "input_length": n_in, "output_length": n_out, "hash_ids": hash_ids}


# --- reading ---------------------------------------------------------------------------------


def test_mooncake_timestamps_are_milliseconds_sorted_and_shifted(tmp_path: Path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            mooncake(1200, 700, 10, [1, 2]),
            mooncake(1000, 300, 20, [1]),
            "",
            mooncake(1450, 512, 5, [1]),
        ],
    )
    trace = read_trace(path)
    assert trace.format == "mooncake" and trace.path == str(path)
    assert trace.requests == (
        TraceRequest(0.0, 300, 20, (1,)),
        TraceRequest(0.2, 700, 10, (1, 2)),
        TraceRequest(0.45, 512, 5, (1,)),
    )
    assert [r.line for r in trace.requests] == [2, 1, 4]  # the blank line counts
    assert trace.count == 3 and trace.span_s == 0.45


def test_plain_jsonl_in_seconds_sorts_stably_and_allows_negative_times(tmp_path: Path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 2.5, "input_tokens": 10, "output_tokens": 3, "extra": "ignored"},
            {"timestamp": -1.0, "input_tokens": 20, "output_tokens": 4, "hash_ids": [7]},
            {"timestamp": 2.5, "input_tokens": 30, "output_tokens": 5},
        ],
    )
    trace = read_trace(path)
    assert trace.format == "jsonl"
    assert [(r.timestamp_s, r.input_tokens) for r in trace.requests] == [
        (0.0, 20),
        (3.5, 10),  # equal times keep the file's order
        (3.5, 30),
    ]
    assert [r.hash_ids for r in trace.requests] == [(7,), (), ()]
    assert read_trace(path, "jsonl") == trace


def test_max_requests_keeps_the_earliest(tmp_path: Path):
    path = write_jsonl(
        tmp_path / "t.jsonl", [mooncake(t, 100 + t, 8, [t]) for t in (500, 100, 300, 200)]
    )
    trace = read_trace(path, max_requests=2)
    assert [r.input_tokens for r in trace.requests] == [200, 300]
    assert trace.span_s == 0.1
    assert read_trace(path, max_requests=10).count == 4


@pytest.mark.parametrize(
    ("lines", "fmt", "match"),
    [
        (
            [mooncake(0, 5, 1, []), mooncake(1, 5, 1, []), mooncake(2, -1, 1, [])],
            "auto",
            "line 3: input_length must be a positive integer, got -1",
        ),
        ([mooncake(0, 5, 0, [])], "auto", "line 1: output_length must be a positive integer"),
        ([mooncake(0, 5, True, [])], "auto", "output_length must be a positive integer, got True"),
        (
            ["", {"timestamp": 0, "input_length": 5, "hash_ids": []}],
            "auto",
            "line 2: missing output_length .*needs timestamp, input_length, output_length, "
            "hash_ids",
        ),
        (
            [{"timestamp": 0, "input_length": 5, "output_length": 1}],
            "auto",
            "missing hash_ids",
        ),
        (
            [mooncake(0, 5, 1, [])],
            "jsonl",
            "line 1: missing input_tokens .*needs timestamp, input_tokens, output_tokens",
        ),
        (
            [{"timestamp": "soon", "input_tokens": 5, "output_tokens": 1}],
            "auto",
            "line 1: timestamp must be a number of seconds, got 'soon'",
        ),
        ([mooncake(0, 5, 1, [1, 2]) | {"timestamp": None}], "auto", "number of milliseconds"),
        ([mooncake(0, 5, 1, [1, "2"])], "auto", "line 1: hash_ids must be a list of integers"),
        ([mooncake(0, 5, 1, [])] * 2 + ["{not json"], "auto", "line 3: invalid JSON"),
        (["[1, 2]"], "auto", "line 1: a trace record must be a JSON object"),
        (
            [{"timestamp": 0, "prompt": "hi"}],
            "auto",
            "line 1: cannot tell the trace format.*input_length.*input_tokens.*prompt, timestamp",
        ),
        (["", "  "], "auto", "has no requests"),
        ([mooncake(0, 5, 1, [])], "csv", "trace format 'csv' is not one of auto, mooncake, jsonl"),
    ],
)
def test_bad_traces_are_usage_errors_naming_the_line(
    tmp_path: Path, lines: list[object], fmt: str, match: str
):
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(WorkloadError, match=match) as info:
        read_trace(path, fmt)  # type: ignore[arg-type]
    assert isinstance(info.value, MoeperfUsageError)  # exit 2, no traceback
    if fmt != "csv":
        assert str(path) in str(info.value)


def test_missing_files_and_bad_limits_are_usage_errors(tmp_path: Path):
    with pytest.raises(WorkloadError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(WorkloadError, match="is not a file"):
        read_trace(tmp_path)
    path = write_jsonl(tmp_path / "t.jsonl", [mooncake(0, 5, 1, [])])
    with pytest.raises(WorkloadError, match="max_requests must be >= 1, got 0"):
        read_trace(path, max_requests=0)


# --- prompts ---------------------------------------------------------------------------------

B = 32  # block tokens of the hand-written traces


def trace_of(*requests: TraceRequest) -> Trace:
    return Trace("<test>", "mooncake", requests)


def req(n_in: int, hash_ids: tuple[int, ...] = (), n_out: int = 4, line: int = 0) -> TraceRequest:
    return TraceRequest(0.0, n_in, n_out, hash_ids, line)


def prompts_of(tok: HFTokenizer, trace: Trace, block_tokens: int = B, seed: int = 0):
    return asyncio.run(trace_prompts(tok, trace, block_tokens, seed))


def token_ids(text: str) -> list[int]:
    tok = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    return tok.encode(text, add_special_tokens=False).ids


def common_prefix_len(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


# Mooncake's rule: one hash id per block, the last one partial (ceil(input / B) ids).
SHARING = trace_of(
    req(3 * B + 5, (1, 2, 3, 10)),  # blocks 1 and 2 shared, block 3 full, a 5-token tail
    req(3 * B + 20, (1, 2, 4, 11)),
    req(2 * B, (1, 2)),  # the two blocks alone
    req(4 * B, (1, 2, 5, 6)),
    req(B - 7, (9,)),  # a partial block only
    req(3 * B + 5, (1, 2, 3, 10)),  # the first request again
    req(2 * B + 5, (1, 2, 3)),  # block 3 as a 5-token tail
    req(2 * B + 5, (1, 2)),  # no id for the partial block: a tail of its own
    req(50),  # no hash ids: a text of its own
    req(50),
)


@pytest.mark.parametrize("which", ["hf", "ref"])
def test_trace_prompts_are_exact_in_the_tokenizer(which: str, request: pytest.FixtureRequest):
    tok: HFTokenizer = request.getfixturevalue(which)
    ps = prompts_of(tok, SHARING)
    assert [p.prompt_tokens for p in ps] == [r.input_tokens for r in SHARING.requests]
    assert [tok.count(p.text) for p in ps] == [r.input_tokens for r in SHARING.requests]
    assert [p.output_tokens for p in ps] == [4] * SHARING.count
    assert all(isinstance(p, Prompt) for p in ps)


@pytest.mark.parametrize("which", ["hf", "ref"])
def test_shared_hash_ids_are_a_shared_string_prefix(which: str, request: pytest.FixtureRequest):
    tok: HFTokenizer = request.getfixturevalue(which)
    ps = [p.text for p in prompts_of(tok, SHARING)]
    two_blocks = ps[2]  # exactly blocks 1 and 2
    assert tok.count(two_blocks) == 2 * B
    for i in (0, 1, 3, 5, 6):
        assert ps[i].startswith(two_blocks)
    assert os.path.commonprefix([ps[0], ps[1]]).startswith(two_blocks)  # noqa: RUF071
    assert ps[0].startswith(ps[6][: len(two_blocks)])
    assert ps[5] == ps[0]  # identical requests, identical prompts
    assert ps[6] != ps[0][: len(ps[6])]  # block 3 cut short is its own text, not block 3's
    assert ps[7].startswith(two_blocks) and ps[7] != ps[6]
    assert ps[8] != ps[9]
    assert not ps[4].startswith(ps[0][:10])


def test_shared_blocks_are_the_same_tokens_up_to_the_joint(ref: HFTokenizer):
    ps = [p.text for p in prompts_of(ref, SHARING)]
    first, second, two_blocks = token_ids(ps[0]), token_ids(ps[1]), token_ids(ps[2])
    assert len(two_blocks) == 2 * B
    assert common_prefix_len(first, second) >= 2 * B - 1
    assert common_prefix_len(first, two_blocks) >= 2 * B - 1


def test_trace_prompts_are_deterministic_per_seed(hf: HFTokenizer):
    assert prompts_of(hf, SHARING, seed=3) == prompts_of(hf, SHARING, seed=3)
    assert prompts_of(hf, SHARING, seed=3) != prompts_of(hf, SHARING, seed=4)


def test_too_few_hash_ids_name_the_line(hf: HFTokenizer):
    trace = trace_of(req(B, (1,), line=1), req(3 * B + 1, (1, 2), line=7))
    with pytest.raises(WorkloadError, match=r"<test>: line 7: 97 input tokens are 3 full blocks"):
        prompts_of(hf, trace)
    with pytest.raises(WorkloadError, match="block_tokens must be >= 1"):
        prompts_of(hf, trace, block_tokens=0)


def test_a_hash_id_reused_behind_another_prefix_still_gives_exact_prompts(hf: HFTokenizer):
    # Not Mooncake's chained ids: block 2 follows block 1 in one request and block 7 in another.
    trace = trace_of(req(2 * B, (1, 2)), req(2 * B, (7, 2)), req(3 * B, (2, 1, 7)))
    ps = prompts_of(hf, trace)
    assert [hf.count(p.text) for p in ps] == [2 * B, 2 * B, 3 * B]


# --- the shipped trace and the generator -----------------------------------------------------


def first_block_shared_share(trace: Trace) -> float:
    """Requests whose first hash id appears in another request."""
    holders: dict[int, set[int]] = {}
    for i, r in enumerate(trace.requests):
        for h in r.hash_ids:
            holders.setdefault(h, set()).add(i)
    return sum(len(holders[r.hash_ids[0]]) > 1 for r in trace.requests) / trace.count


def test_the_shipped_trace_fits_the_reference_target(ref: HFTokenizer):
    trace = read_trace(SHIPPED)
    assert trace.format == "mooncake"
    assert 50 <= trace.count <= 70 and 9.0 <= trace.span_s <= 15.0
    assert first_block_shared_share(trace) >= 0.5
    for r in trace.requests:
        assert 64 <= r.input_tokens <= 640 and 8 <= r.output_tokens <= 32
        assert r.input_tokens + r.output_tokens < 1000
        assert len(r.hash_ids) == math.ceil(r.input_tokens / SHIPPED_BLOCK_TOKENS)
    ps = prompts_of(ref, trace, SHIPPED_BLOCK_TOKENS)
    assert [ref.count(p.text) for p in ps] == [r.input_tokens for r in trace.requests]


def generate(tmp_path: Path, name: str, *flags: str) -> bytes:
    out = tmp_path / name
    args = ["--out", str(out), "--requests", "200", "--rate", "10", "--block-tokens", "64"]
    assert make_trace.main([*args, *flags]) == 0
    return out.read_bytes()


def test_the_generator_is_deterministic_per_seed(tmp_path: Path):
    assert generate(tmp_path, "a", "--seed", "5") == generate(tmp_path, "b", "--seed", "5")
    assert generate(tmp_path, "a", "--seed", "5") != generate(tmp_path, "c", "--seed", "6")


def test_generated_traces_have_the_structure_they_claim(tmp_path: Path):
    generate(tmp_path, "t.jsonl", "--seed", "1", "--input-tokens", "1", "2048")
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert list(records[0]) == ["timestamp", "input_length", "output_length", "hash_ids"]
    times = [r["timestamp"] for r in records]
    assert times[0] == 0 and times == sorted(times) and all(type(t) is int for t in times)
    assert 10.0 <= times[-1] / 1000 <= 30.0  # 200 requests at 10/s
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 64) for r in records)
    assert first_block_shared_share(read_trace(tmp_path / "t.jsonl")) >= 0.5
    # Without system prompts, only follow-up turns share blocks: each starts with all the full
    # blocks of an earlier request, and adds some.
    generate(tmp_path, "turns.jsonl", "--seed", "1", "--system-prompts", "0")
    trace = read_trace(tmp_path / "turns.jsonl")
    followups = 0
    for i, r in enumerate(trace.requests):
        earlier = trace.requests[:i]
        if any(e.hash_ids[0] == r.hash_ids[0] for e in earlier):
            followups += 1
            assert any(
                len(r.hash_ids) > (full := e.input_tokens // 64) > 0
                and r.hash_ids[:full] == e.hash_ids[:full]
                for e in earlier
            )
    assert followups >= 20  # --followup-share 0.3 of 200


def test_the_generator_rejects_bad_shapes_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = str(tmp_path / "t.jsonl")
    assert make_trace.main(["--out", out, "--requests", "5", "--rate", "0"]) == 2
    assert "rate must be > 0" in capsys.readouterr().err
    flags = ["--out", out, "--requests", "5", "--rate", "1", "--input-tokens", "1", "512"]
    assert make_trace.main(flags) == 2  # 4-block system prompts of 512 tokens leave no room
    assert "leave no room" in capsys.readouterr().err
    assert not Path(out).exists()
