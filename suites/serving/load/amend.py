"""Client-side token counts, added after a level: each deferred result's text re-tokenized
(the target's /tokenize or the tokenizer on this machine) and its record sent again as an
amendment (suites/serving/load/messages.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import aiohttp

from moeperf.suites.serving.load.client import StreamResult, set_token_times
from moeperf.suites.serving.load.deferred import DeferredSpool
from moeperf.suites.serving.load.messages import (
    Amended,
)
from moeperf.suites.serving.workload.tokenizer import (
    ServerTokenizer,
    TargetTokenizer,
    TokenizerError,
)

_TOKENIZE_CONCURRENCY = 32


# Results read back from the spool at once after a level (their memory, not the level's).
_DEFERRED_BATCH = 1024


async def finish_deferred(
    deferred: DeferredSpool, tokenizer: TargetTokenizer | None, results: Any
) -> None:
    """Send amended records with client-side token counts; empties ``deferred``.

    Runs between levels, so a tokenizer served by the target adds no load to a level.
    Each amendment is a new record object: the original may still be being pickled by
    the results queue's feeder thread.
    """
    if tokenizer is None:
        for _ in deferred.drain(_DEFERRED_BATCH):
            pass  # a stopped run: its records stand without client counts
        return
    server = isinstance(tokenizer, ServerTokenizer)
    limit = asyncio.Semaphore(_TOKENIZE_CONCURRENCY)

    async def amend(result: StreamResult) -> None:
        record = result.record
        async with limit:
            # A client-side count is a cross-check: without it the record still stands.
            with contextlib.suppress(TokenizerError, aiohttp.ClientError, TimeoutError):
                if result.counts_unknown:
                    counts = await tokenizer.achunk_token_counts(result.texts)
                    record = dataclasses.replace(
                        record,
                        chunk_tokens=list(counts),
                        chunk_tokens_source="server_tokenize" if server else "tokenizer",
                        client_output_tokens=sum(counts),
                    )
                    set_token_times(record)
                elif result.texts:
                    count = await tokenizer.acount("".join(result.texts))
                    record = dataclasses.replace(record, client_output_tokens=count)
        if record is not result.record:
            results.put(Amended(record))

    for batch in deferred.drain(_DEFERRED_BATCH):
        await asyncio.gather(*(amend(r) for r in batch))
