"""Which requests run in the next step, and with how many tokens each.

Iteration-level (continuous) batching as vLLM's v1 scheduler does it: every step has a
token budget shared by decodes and prefill chunks. Running requests go first, in arrival
order: a decoding request takes one token plus its MTP drafts, a prefilling one the next
chunk of its prompt. Then waiting requests are admitted while budget, running slots and
KV blocks last; a newcomer's prompt is first looked up in the prefix cache.

When a running request needs a block and none is free, the most recently admitted request
is preempted: its blocks are freed and it goes back to the front of the queue, to be
recomputed (prompt and output so far) when there is room.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from moeperf.targets.serving.engine.api import EngineConfig
from moeperf.targets.serving.engine.block_pool import BlockPool, NoFreeBlocksError, chain_hashes
from moeperf.targets.serving.engine.sequence import Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int  # first position fed (= seq.num_computed)
    num_new: int  # committed tokens fed: token_ids[start : start + num_new]
    drafts: list[int]  # MTP drafts fed after them for verification

    @property
    def samples(self) -> bool:
        """Reaches the end of the known tokens, so the step samples a next token."""
        return self.start + self.num_new == self.seq.num_tokens

    @property
    def token_ids(self) -> list[int]:
        return self.seq.token_ids[self.start : self.start + self.num_new] + self.drafts


@dataclass
class SchedulerCounters:
    preemptions: int = 0
    prefix_cache_queries: int = 0  # tokens
    prefix_cache_hits: int = 0  # tokens


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        pool: BlockPool,
        on_release: Callable[[Sequence], None] | None = None,
    ):
        self.config = config
        self.pool = pool
        # Called when a running request leaves the batch (finished or preempted): what the
        # engine keeps per running request beside its blocks (linear state) goes with it.
        self._on_release = on_release
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = SchedulerCounters()

    def schedule(self) -> list[ScheduledSeq]:
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            item = self._plan(seq, budget)
            if item is None:  # a whole prompt that does not fit this step (no chunking)
                i += 1
                continue
            if not self._reserve_blocks(item):
                continue  # seq itself was preempted; the same index is now the next one
            scheduled.append(item)
            budget -= item.num_new + len(item.drafts)
            i += 1

        while self.waiting and budget > 0 and len(self.running) < self.config.max_running_requests:
            seq = self.waiting[0]
            hit_tokens = self._take_prefix_hit(seq)
            item = self._plan(seq, budget)
            if item is None or not self._try_allocate(item):
                # Hold nothing while waiting: blocks kept by a queued request could starve
                # the running ones, which can only free blocks by preempting each other.
                self.pool.free(seq.blocks)
                seq.reset_for_recompute()
                break  # first come, first served: nobody overtakes the head of the queue
            if seq.params.prompt_logprobs is None:  # the others are not looked up
                self.counters.prefix_cache_queries += seq.num_tokens
            self.counters.prefix_cache_hits += hit_tokens
            self.waiting.popleft()
            self.running.append(seq)
            scheduled.append(item)
            budget -= item.num_new
        return scheduled

    def finish(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.free(seq.blocks)
        seq.blocks = []
        if self._on_release is not None:
            self._on_release(seq)

    # -- planning --------------------------------------------------------------------------

    def _plan(self, seq: Sequence, budget: int) -> ScheduledSeq | None:
        remaining = seq.num_tokens - seq.num_computed
        chunk = self.config.chunked_prefill_size
        if remaining > 1 or not seq.is_decoding:
            if chunk == 0 and remaining > budget:
                return None
            num_new = min(remaining, chunk or remaining, budget)
            return ScheduledSeq(seq, seq.num_computed, num_new, [])
        drafts = seq.draft_ids[: max(budget - 1, 0)]
        return ScheduledSeq(seq, seq.num_computed, 1, drafts)

    def _blocks_needed(self, item: ScheduledSeq) -> int:
        # Main KV up to the last fed token; with MTP, entries reach the token committed
        # after the accepted drafts, then k - 1 chained drafts beyond it.
        last = item.start + item.num_new + len(item.drafts) - 1
        if self.config.mtp_tokens:
            last += self.config.mtp_tokens
        return last // self.config.block_size + 1

    def _try_allocate(self, item: ScheduledSeq) -> bool:
        missing = self._blocks_needed(item) - len(item.seq.blocks)
        if missing <= 0:
            return True
        try:
            item.seq.blocks.extend(self.pool.allocate_many(missing))
        except NoFreeBlocksError:
            return False
        return True

    def _reserve_blocks(self, item: ScheduledSeq) -> bool:
        while not self._try_allocate(item):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is item.seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.free(seq.blocks)
        seq.reset_for_recompute()
        if self._on_release is not None:
            self._on_release(seq)
        self.waiting.appendleft(seq)
        self.counters.preemptions += 1

    def _take_prefix_hit(self, seq: Sequence) -> int:
        """Give ``seq`` the cached blocks of its longest cached prefix; tokens hit."""
        bs = self.config.block_size
        # At least one token must be computed, for the logits of the next one.
        cacheable = (seq.num_tokens - 1) // bs
        # A request asking for prompt logprobs needs the logits of every prompt position,
        # which cached blocks (keys and values) do not give: it computes its whole prompt,
        # as vLLM's scheduler has it (prompt_logprobs.py).
        wants_logits = seq.params.prompt_logprobs is not None
        if not self.pool.enable_prefix_caching or cacheable == 0 or wants_logits:
            return 0
        hashes = chain_hashes(seq.token_ids, bs, cacheable)
        hit = self.pool.lookup(hashes)
        seq.blocks = list(hit)
        seq.num_computed = seq.num_mtp_computed = len(hit) * bs
        seq.block_hashes = hashes[: len(hit)]
        if seq.num_output == 0:
            seq.cached_prompt_tokens = len(hit) * bs
        return len(hit) * bs
