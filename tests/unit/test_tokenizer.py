"""Target tokenizers: a tiny BPE trained here, and a /tokenize server on loopback."""

import asyncio
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from moeperf.suites.serving.workload.tokenizer import (
    HFTokenizer,
    ServerTokenizer,
    TokenizerError,
    resolve_tokenizer,
)

# The special token trained into tiny_bpe_dir (tests/conftest.py).
SPECIAL_TOKEN = "<|endoftext|>"


@pytest.fixture(scope="module")
def tok_dir(tiny_bpe_dir: Path) -> Path:
    return tiny_bpe_dir


@pytest.fixture(scope="module")
def hf(tok_dir: Path) -> HFTokenizer:
    return HFTokenizer.from_dir(tok_dir)


# --- HFTokenizer -----------------------------------------------------------------------------


def test_from_dir_errors_say_what_is_missing(tmp_path: Path):
    with pytest.raises(TokenizerError, match="does not exist"):
        HFTokenizer.from_dir(tmp_path / "nope")
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        HFTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="not a valid tokenizers JSON"):
        HFTokenizer.from_dir(tmp_path)


def test_from_dir_accepts_the_file_itself(tok_dir: Path, hf: HFTokenizer):
    assert HFTokenizer.from_dir(tok_dir / "tokenizer.json").count("hello world") == hf.count(
        "hello world"
    )


def test_build_text_is_exact_over_many_lengths(hf: HFTokenizer):
    rng = random.Random(7)
    lengths = [*range(1, 41), *(rng.randint(1, 2000) for _ in range(100)), 2000]
    texts = hf.build_many(lengths, [random.Random(n) for n in lengths])
    assert [hf.count(t) for t in texts] == lengths
    assert not any(SPECIAL_TOKEN in t for t in texts)
    assert all(c.isprintable() or c in "\n\t" for t in texts for c in t)


def test_build_text_matches_build_many_and_is_deterministic(hf: HFTokenizer):
    single = [hf.build_text(n, random.Random(f"s{n}")) for n in (5, 300, 999)]
    many = hf.build_many([5, 300, 999], [random.Random(f"s{n}") for n in (5, 300, 999)])
    assert single == many
    assert hf.build_text(300, random.Random(1)) != hf.build_text(300, random.Random(2))


def test_build_text_rejects_nonpositive_lengths(hf: HFTokenizer):
    with pytest.raises(TokenizerError, match="at least 1 token"):
        hf.build_text(0, random.Random(0))


def test_chunk_counts_sum_to_whole_text_for_any_split(hf: HFTokenizer):
    rng = random.Random(3)
    text = "Hello world, the café in 東京 returns résumé objects ✓  twice. " + hf.build_text(
        200, rng
    )
    whole = hf.count(text)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(1, 40)))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        counts = hf.chunk_token_counts(chunks)
        assert len(counts) == len(chunks)
        assert sum(counts) == whole


def test_chunk_counts_follow_token_boundaries(hf: HFTokenizer):
    text = "Returns the number of items, and the café in 東京."
    offsets = hf._tok.encode(text, add_special_tokens=False).offsets
    # A chunk per token, cut at each token's end: each chunk holds exactly one token's last
    # character (multi-byte characters produce several tokens ending at the same place).
    ends = sorted({end for _, end in offsets})
    chunks = [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    tokens_ending_at = [sum(1 for _, e in offsets if e == end) for end in ends]
    assert hf.chunk_token_counts(chunks) == tokens_ending_at


def test_chunk_counts_split_mid_word_count_merged_token_once(hf: HFTokenizer):
    # The longest merged word-internal token: several letters, one token.
    text = max((t for t in hf._tok.get_vocab() if t.isascii() and t.isalpha()), key=len)
    assert len(text) >= 4
    assert hf.count(text) == 1
    half = len(text) // 2
    assert hf.chunk_token_counts([text[:half], text[half:]]) == [0, 1]
    # Tokenizing the pieces separately (what /tokenize must do) counts more.
    assert hf.count(text[:half]) + hf.count(text[half:]) > 1


def test_chunk_counts_edge_cases(hf: HFTokenizer):
    assert hf.chunk_token_counts([]) == []
    assert hf.chunk_token_counts(["", "", ""]) == [0, 0, 0]
    counts = hf.chunk_token_counts(["", "hello", "", " world", ""])
    assert counts[0] == counts[2] == counts[4] == 0
    assert sum(counts) == hf.count("hello world")


def test_async_protocol_matches_sync(hf: HFTokenizer):
    async def go():
        text = hf.build_text(50, random.Random(0))
        assert await hf.acount(text) == 50
        assert await hf.acount_many([text, "a b"]) == [50, hf.count("a b")]
        assert await hf.achunk_token_counts(["ab", "cd"]) == hf.chunk_token_counts(["ab", "cd"])
        assert hf.count(await hf.abuild_text(17, random.Random(0))) == 17
        assert await hf.abuild_many([3, 4], [random.Random(0), random.Random(1)]) == (
            hf.build_many([3, 4], [random.Random(0), random.Random(1)])
        )
        await hf.aclose()

    asyncio.run(go())


def test_resolve_tokenizer(tok_dir: Path, tmp_path: Path):
    assert resolve_tokenizer(None, "http://x") is None
    assert resolve_tokenizer("", None) is None
    server = resolve_tokenizer("server", "http://127.0.0.1:9/")
    assert isinstance(server, ServerTokenizer)
    assert server.url == "http://127.0.0.1:9/tokenize"
    with pytest.raises(TokenizerError, match="base URL"):
        resolve_tokenizer("server", None)
    assert isinstance(resolve_tokenizer(str(tok_dir), None), HFTokenizer)
    with pytest.raises(TokenizerError, match="does not exist"):
        resolve_tokenizer(str(tmp_path / "missing"), None)


# --- ServerTokenizer against a real /tokenize on loopback ------------------------------------


def piece_count(text: str, piece_chars: int) -> int:
    """Words, each split into pieces of up to `piece_chars` characters."""
    return sum(-(-len(w) // piece_chars) for w in text.split())


SEEN = web.AppKey("seen", list)


def tokenize_app() -> web.Application:
    """/tokenize counts words; /pieces/tokenize counts 4-character word pieces, so words are
    worth 1-3 tokens; /broken/tokenize answers without a count."""
    seen: list[dict] = []

    def handler(piece_chars: int):
        async def tokenize(request: web.Request) -> web.Response:
            body = await request.json()
            seen.append(body)
            n = piece_count(body["prompt"], piece_chars)
            return web.json_response({"tokens": list(range(n)), "count": n, "max_model_len": 1})

        return tokenize

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"detail": "no count here"})

    app = web.Application()
    app[SEEN] = seen
    app.router.add_post("/tokenize", handler(10_000))
    app.router.add_post("/pieces/tokenize", handler(4))
    app.router.add_post("/broken/tokenize", broken)
    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, web.Application]]:
    """The app served on 127.0.0.1 from its own event loop in a thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    app = tokenize_app()
    runner = web.AppRunner(app)

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    base_url = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    yield base_url, app
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def run(coro):
    return asyncio.run(coro)


def test_server_count_and_chunks(server):
    base_url, app = server

    async def go():
        async with ServerTokenizer(base_url) as tok:
            assert await tok.acount("the quick brown fox") == 4
            assert await tok.acount("") == 0
            assert await tok.acount_many(["a b", "c", "d e f"]) == [2, 1, 3]
            # Each chunk is tokenized on its own: "wor" + "ld" is counted twice.
            assert await tok.achunk_token_counts(["hello wor", "ld again", ""]) == [2, 2, 0]

    run(go())
    assert all(body["add_special_tokens"] is False for body in app[SEEN])


@pytest.mark.parametrize("path", ["", "/pieces"])
def test_server_build_text_is_exact(server, path: str):
    base_url, _ = server
    piece_chars = 4 if path else 10_000

    async def go():
        async with ServerTokenizer(base_url + path) as tok:
            rng = random.Random(0)
            lengths = [1, 2, 3, 7, 50, 333, 1000]
            for n in lengths:
                text = await tok.abuild_text(n, rng)
                assert piece_count(text, piece_chars) == n
            many = await tok.abuild_many(lengths, [random.Random(n) for n in lengths])
            assert [piece_count(t, piece_chars) for t in many] == lengths
            again = await tok.abuild_many(lengths, [random.Random(n) for n in lengths])
            assert again == many

    run(go())


def test_server_uses_a_given_session_and_leaves_it_open(server):
    base_url, _ = server

    async def go():
        async with aiohttp.ClientSession() as session:
            tok = ServerTokenizer(base_url, session)
            assert await tok.acount("one two") == 2
            await tok.aclose()
            assert not session.closed

    run(go())


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_errors_are_tokenizer_errors(server):
    base_url, _ = server

    async def expect(url: str, match: str):
        async with ServerTokenizer(url, timeout_s=5) as tok:
            with pytest.raises(TokenizerError, match=match):
                await tok.acount("hello")

    run(expect(base_url + "/missing", "HTTP 404"))
    run(expect(base_url + "/broken", "without 'count' or 'tokens'"))
    run(expect(f"http://127.0.0.1:{unused_port()}", "failed"))
