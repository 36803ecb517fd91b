"""Prompt logprobs over real loopback HTTP: the reference target's echo, prompt_logprobs and
return_tokens_as_token_ids against a dense forward of the same weights in this process.

One server (prefix caching on, its default; prefill chunks of 16 tokens), started once.
Both sides run torch on one thread: two processes with two threads each on the 2-core
machine oversubscribe it (a 300-token forward took 3 s instead of 40 ms).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import torch

from moeperf.targets.model.checkpoint import default_model_dir, load_mixtral_dir
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.tokenizer import ChatTokenizer
from moeperf.targets.ready_line import ReadyChild

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0  # importing torch and loading the weights on a busy 2-core machine

TEXT = (
    "Every request that asks for prompt logprobs is computed whole, so the numbers it "
    "returns are the model's own at every position of the prompt."
)


def post(server: ReadyChild, path: str, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=60)


def sse_chunks(response: httpx.Response) -> list[dict]:
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: ") :]) for e in events[:-1]]


@pytest.fixture(scope="module")
def server(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    return reference_target({"seed": 0, "chunked_prefill_size": 16, "block_size": 4, "threads": 1})


@pytest.fixture(scope="module")
def dense() -> Iterator[tuple[MoETransformer, ChatTokenizer]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield load_mixtral_dir(default_model_dir())
    finally:
        torch.set_num_threads(threads)


def expected_rows(model: MoETransformer, ids: list[int]) -> torch.Tensor:
    """[len(ids), V]: row p is log P(token p + 1 | tokens 0..p) under a dense forward."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


def completion(server: ReadyChild, **fields: object) -> dict:
    response = post(server, "/v1/completions", {"temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def check_echo(body: dict, ids: list[int], rows: torch.Tensor, top: int) -> None:
    (choice,) = body["choices"]
    lps = choice["logprobs"]
    n = len(ids)
    assert lps["tokens"][:n] == [f"token_id:{t}" for t in ids]
    assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
    for j in range(1, n):
        assert lps["token_logprobs"][j] == pytest.approx(float(rows[j - 1, ids[j]]), abs=1e-4)
        best = rows[j - 1].topk(top).indices.tolist()
        assert {f"token_id:{t}" for t in best} <= set(lps["top_logprobs"][j])
    assert len(lps["tokens"]) == n + body["usage"]["completion_tokens"]


def test_echo_logprobs_equal_a_dense_forward(server, dense):
    model, tokenizer = dense
    ids = tokenizer.encode(TEXT)
    rows = expected_rows(model, ids)
    body = completion(
        server, prompt=ids, max_tokens=3, logprobs=3, echo=True, return_tokens_as_token_ids=True
    )
    check_echo(body, ids, rows, top=3)
    choice = body["choices"][0]
    assert choice["text"].startswith(tokenizer.decode(ids))
    assert choice["logprobs"]["text_offset"][0] == 0
    # The output's tokens follow the prompt's: greedy, so the dense argmax of the last row.
    assert choice["logprobs"]["tokens"][len(ids)] == f"token_id:{int(rows[-1].argmax())}"
    # A string prompt is echoed as given.
    text_body = completion(server, prompt=TEXT, max_tokens=1, echo=True)
    assert text_body["choices"][0]["text"].startswith(TEXT)


def test_vllm_prompt_logprobs_list(server, dense):
    model, tokenizer = dense
    ids = tokenizer.encode(TEXT)[:30]
    rows = expected_rows(model, ids)
    body = completion(server, prompt=ids, max_tokens=1, prompt_logprobs=2)
    entries = body["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(ids) and entries[0] is None
    for j in range(1, len(ids)):
        entry = entries[j]
        row = rows[j - 1]
        mine = entry[str(ids[j])]
        assert mine["logprob"] == pytest.approx(float(row[ids[j]]), abs=1e-4)
        assert mine["rank"] == int((row > row[ids[j]]).sum()) + 1
        assert mine["decoded_token"] == tokenizer.decode([ids[j]])
        best = row.topk(2).indices.tolist()
        assert all(str(t) in entry for t in best)
        assert entry[str(best[0])]["rank"] == 1
    assert body["choices"][0]["logprobs"] is None  # not asked for


def test_a_cached_prompt_still_gets_every_prompt_logprob(server, dense):
    model, tokenizer = dense
    ids = tokenizer.encode("A repeated prompt fills the prefix cache: " + TEXT)
    rows = expected_rows(model, ids)
    for _ in range(2):  # the second one is served from the prefix cache
        plain = completion(server, prompt=ids, max_tokens=1)
    assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    body = completion(
        server, prompt=ids, max_tokens=2, logprobs=1, echo=True, return_tokens_as_token_ids=True
    )
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    check_echo(body, ids, rows, top=1)


def test_streamed_echo_puts_the_prompt_first(server, dense):
    _, tokenizer = dense
    ids = tokenizer.encode(TEXT)[:12]
    response = post(
        server,
        "/v1/completions",
        {"prompt": ids, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True,
         "echo": True, "logprobs": 0, "return_tokens_as_token_ids": True},
    )  # fmt: skip
    chunks = sse_chunks(response)
    first = chunks[0]["choices"][0]
    assert first["text"].startswith(tokenizer.decode(ids))
    assert first["logprobs"]["tokens"][: len(ids)] == [f"token_id:{t}" for t in ids]
    rest = [t for c in chunks[1:] for t in c["choices"][0]["logprobs"]["tokens"]]
    assert len(first["logprobs"]["tokens"]) - len(ids) + len(rest) == 4


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/completions", {"prompt": "x", "prompt_logprobs": 1, "stream": True},
         "prompt_logprobs"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "echo": True},
         "echo"),
        ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_refused(server, path, body, field):
    response = post(server, path, json.dumps(body).encode())
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field


def test_output_tokens_as_ids(server):
    body = completion(server, prompt="The", max_tokens=3, logprobs=2,
                      return_tokens_as_token_ids=True, ignore_eos=True)  # fmt: skip
    lps = body["choices"][0]["logprobs"]
    assert all(t.startswith("token_id:") for t in lps["tokens"])
    assert all(all(k.startswith("token_id:") for k in top) for top in lps["top_logprobs"])
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
