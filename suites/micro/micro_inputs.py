"""Inputs of the micro-benchmarks: one realistic streamed response and its record.

The response is a chat completion of ``RESPONSE_TOKENS`` tokens, one token per chunk, with
vLLM's per-chunk usage (``continuous_usage_stats``), in exactly the bytes the embedded
synthetic target sends (``targets.synthetic.openai_format``): a role chunk, one chunk per
token, the usage-only chunk and ``data: [DONE]``.
"""

from __future__ import annotations

from moeperf.collectors.records import RequestRecord
from moeperf.targets.openai_wire import DONE_EVENT, WireVariant
from moeperf.targets.synthetic.openai_format import ChunkEncoder

RESPONSE_TOKENS = 256
PROMPT_TOKENS = 512
# How the bytes reach the client: one SSE event per read (a stream at 10 ms per token),
# or 4 KiB reads that hold several events and split others (a client falling behind).
DELIVERIES = ("per_event", "4096B")


def response_events(tokens: int = RESPONSE_TOKENS) -> list[bytes]:
    """The SSE events of one streamed chat completion, in order."""
    encoder = ChunkEncoder(
        chat=True,
        response_id="chatcmpl-5b0e9c6f2d0a4c4e9f7c1a2b3c4d5e6f",
        created=1767225600,
        model="deepseek-ai/DeepSeek-V3",
        prompt_tokens=PROMPT_TOKENS,
        logprobs=False,
        shape=WireVariant().shape(chat=True, include_usage=True, continuous_usage=True),
    )
    events = [encoder.role()]
    events += [encoder.tokens(i, 1, last=i == tokens - 1) for i in range(tokens)]
    events += [encoder.usage(tokens), DONE_EVENT]
    return events


def delivered(events: list[bytes], delivery: str) -> list[bytes]:
    """The byte pieces the client reads for ``events`` under one of ``DELIVERIES``."""
    if delivery == "per_event":
        return list(events)
    size = int(delivery.removesuffix("B"))
    body = b"".join(events)
    return [body[i : i + size] for i in range(0, len(body), size)]


def finished_record(request_id: str = "req-000001") -> RequestRecord:
    """A finished ok request as the client leaves it: TTFT 50 ms, then 10 ms per token."""
    ms = 1_000_000
    send_ns = 1_000 * ms
    # The role chunk, RESPONSE_TOKENS token chunks, then the usage-only chunk.
    chunk_ns = [send_ns + 20 * ms] + [
        send_ns + 50 * ms + 10 * ms * i + 37_000 * (i % 7) for i in range(RESPONSE_TOKENS)
    ]
    chunk_ns.append(chunk_ns[-1] + 200_000)
    chunk_tokens = [0] + [1] * RESPONSE_TOKENS + [0]
    return RequestRecord(
        request_id=request_id,
        scenario="c=32",
        phase="measure",
        worker=0,
        intended_send_ns=send_ns - 150_000,
        send_ns=send_ns,
        done_ns=chunk_ns[-1] + 50_000,
        status="ok",
        chunk_ns=chunk_ns,
        chunk_tokens=chunk_tokens,
        chunk_tokens_source="usage_stats",
        first_token_ns=chunk_ns[1],
        last_token_ns=chunk_ns[-2],
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=RESPONSE_TOKENS,
        http_status=200,
        server_request_id="chatcmpl-5b0e9c6f2d0a4c4e9f7c1a2b3c4d5e6f",
    )
