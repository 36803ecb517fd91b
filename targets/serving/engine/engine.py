"""The engine: requests in, one batched forward per step, tokens out.

``step()`` asks the scheduler for this step's requests and tokens, runs the main model
once over all of them packed together (paged attention, forward_pass.py), keeps the
prompt logprobs of requests that asked for them (prompt_logprobs.py), samples where a
request reached its last known token, verifies MTP drafts (greedy: the longest prefix
agreeing with the main model's argmax; sampled: rejection sampling; either way plus one
token of the main model's own, engine/sampler.py), commits tokens with stop checks
(commit.py), lets the MTP module propose the next drafts, offers newly full blocks to
the prefix cache and reports outputs.

Thread-safe entry points (``add_request``, ``abort_request``, ``stats``,
``request_prefix_cache_reset``) may be called from any thread; ``step`` from one thread
only (see loop.py). The block pool belongs to that thread: a prefix-cache reset is queued
like a request and applied at the start of the next step.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from concurrent.futures import Future
from copy import deepcopy

import torch

from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine import prompt_logprobs
from moeperf.targets.serving.engine.api import (
    EngineConfig,
    EngineCounters,
    EngineStats,
    InvalidRequestError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    TokenLogprob,
)
from moeperf.targets.serving.engine.block_pool import BlockPool, block_hash
from moeperf.targets.serving.engine.commit import sample_and_commit
from moeperf.targets.serving.engine.forward_pass import forward_main
from moeperf.targets.serving.engine.kv_cache import KVCache
from moeperf.targets.serving.engine.linear_state import LinearStateCache
from moeperf.targets.serving.engine.mtp_drafter import MTPDrafter
from moeperf.targets.serving.engine.scheduler import ScheduledSeq, Scheduler
from moeperf.targets.serving.engine.sequence import Sequence
from moeperf.targets.serving.engine.validation import validate_request

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Why a hybrid model serves without prefix caching (its metrics and docs/targets/models.md
# say so): a
# cached block restores the attention layers' keys and values, not the linear layers'
# state at that position, which would need a state snapshot at every block boundary.
PREFIX_CACHING_OFF_FOR_LINEAR = "linear-attention state is not snapshotted at block boundaries"


class Engine:
    def __init__(
        self,
        model: MoETransformer | HybridMoETransformer,
        config: EngineConfig | None = None,
        *,
        eos_token_ids: Seq[int] | None = None,
        seed: int = 0,
    ):
        self.config = config = config or EngineConfig()
        if config.threads:
            torch.set_num_threads(config.threads)
        mcfg = model.config
        if config.mtp_tokens and mcfg.mtp_depth == 0:
            raise ValueError("mtp_tokens > 0 needs a model with an MTP module (mtp_depth > 0)")
        self.model = model.to(_DTYPES[config.dtype]).eval()
        self.eos_token_ids = frozenset(eos_token_ids or (mcfg.eos_token_id,))
        self.cache = KVCache(
            num_attention_slots=model.num_slots,
            num_blocks=config.num_kv_blocks,
            block_size=config.block_size,
            num_kv_heads=mcfg.num_kv_heads,
            head_dim=mcfg.head_dim,
            hidden_size=mcfg.hidden_size,
            keep_hidden=config.mtp_tokens > 0,
            dtype=_DTYPES[config.dtype],
        )
        # A hybrid model's linear layers: a state slot per running request.
        self.linear = (
            LinearStateCache(self.model, config.max_running_requests, _DTYPES[config.dtype])
            if isinstance(self.model, HybridMoETransformer)
            else None
        )
        hybrid = self.linear is not None
        self.prefix_caching_off_reason = (
            PREFIX_CACHING_OFF_FOR_LINEAR
            if hybrid and config.enable_prefix_caching
            else ("off in the engine's config" if not config.enable_prefix_caching else None)
        )
        self.pool = BlockPool(config.num_kv_blocks, config.enable_prefix_caching and not hybrid)
        linear = self.linear
        self.scheduler = Scheduler(
            config, self.pool, on_release=linear.release if linear is not None else None
        )
        self.drafter = (
            MTPDrafter(self.model, self.cache, config.mtp_tokens) if config.mtp_tokens else None
        )
        self.counters = EngineCounters(
            spec_decode_accepted_per_position=[0] * config.mtp_tokens,
            expert_tokens=[[0] * mcfg.num_experts for _ in range(mcfg.num_layers)],
        )
        self._expert_tokens = torch.zeros((mcfg.num_layers, mcfg.num_experts), dtype=torch.long)
        self._seed_source = torch.Generator().manual_seed(seed)
        # The inbox lock is held only for moments, never across a forward: the server's
        # event loop takes it to add requests and must not wait for a step.
        self._inbox_lock = threading.Lock()
        self._inbox: list[Sequence] = []
        self._aborts: list[str] = []
        self._resets: list[Future[int]] = []  # prefix-cache resets, answered by a step
        self._request_ids: set[str] = set()  # in the inbox, waiting or running
        self._live: dict[str, Sequence] = {}  # engine thread only
        self._work = threading.Event()  # set when there is something to do
        self._snapshot = self._take_snapshot()

    # -- thread-safe entry points ----------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: Seq[int],
        params: SamplingParams,
        on_output: Callable[[RequestOutput], None],
    ) -> None:
        """Queue a request; ``on_output`` is called from the engine's thread."""
        prompt = list(prompt_token_ids)
        validate_request(self.config, self.model.config.vocab_size, prompt, params)
        generator = torch.Generator()
        with self._inbox_lock:
            if request_id in self._request_ids:
                raise InvalidRequestError(f"request id {request_id!r} is already in use")
            if self._snapshot.waiting + len(self._inbox) >= self.config.max_waiting_requests:
                raise QueueFullError(
                    f"the waiting queue is full ({self.config.max_waiting_requests} requests)"
                )
            seed = params.seed
            if seed is None:
                seed = int(torch.randint(0, 2**62, (1,), generator=self._seed_source))
            generator.manual_seed(seed)
            self._request_ids.add(request_id)
            self._inbox.append(
                Sequence(request_id, len(prompt), prompt, params, on_output, generator)
            )
            self._work.set()

    def abort_request(self, request_id: str) -> None:
        """End a request (finish reason "abort"); unknown or finished ids are ignored."""
        with self._inbox_lock:
            self._aborts.append(request_id)
            self._work.set()

    def request_prefix_cache_reset(self) -> Future[int]:
        """Queue a prefix-cache reset; the future gets the cached blocks it dropped once
        the stepping thread applied it, at the start of its next step."""
        done: Future[int] = Future()
        with self._inbox_lock:
            self._resets.append(done)
            self._work.set()
        return done

    def reset_prefix_cache(self, timeout_s: float | None = None) -> int:
        """Reset the prefix cache and wait for it: cached blocks dropped. Needs another
        thread stepping the engine (``EngineLoop``); never call it from that thread."""
        return self.request_prefix_cache_reset().result(timeout_s)

    def stats(self) -> EngineStats:
        """As of the end of the last step (requests queued since then count as waiting)."""
        with self._inbox_lock:
            snap, queued = self._snapshot, len(self._inbox)
        return dataclasses.replace(snap, waiting=snap.waiting + queued)

    def abort_all(self) -> None:
        with self._inbox_lock:
            self._aborts.extend(self._request_ids)
            self._work.set()

    def has_work(self) -> bool:
        with self._inbox_lock:
            return bool(self._inbox or self._aborts or self._resets or self._request_ids)

    def wait_for_work(self, timeout_s: float) -> None:
        self._work.wait(timeout_s)

    # -- the step --------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one iteration; False when there was nothing to run. One thread only."""
        emitted: list[tuple[Sequence, RequestOutput]] = []
        with self._inbox_lock:
            inbox, aborts, resets = self._inbox, self._aborts, self._resets
            self._inbox, self._aborts, self._resets = [], [], []
        for done in resets:  # the first drops the cached blocks, any others find none
            if done.set_running_or_notify_cancel():  # a cancelled reset is not applied
                done.set_result(self.pool.reset_prefix_cache())
        self._admit(inbox, aborts, emitted)
        batch = self.scheduler.schedule()
        if batch:
            with torch.inference_mode():
                self._run(batch, emitted)
        snapshot = self._take_snapshot()
        with self._inbox_lock:
            self._snapshot = snapshot
            for seq, _ in emitted:
                if seq.finish_reason:
                    self._request_ids.discard(seq.request_id)
            if not (self._inbox or self._aborts or self._resets or self._request_ids):
                self._work.clear()
        for seq, output in emitted:
            seq.on_output(output)
        return bool(batch) or bool(emitted)

    def _take_snapshot(self) -> EngineStats:
        counters = deepcopy(self.counters)
        counters.expert_tokens = self._expert_tokens.tolist()
        # The scheduler counts these; the snapshot reports them with the rest.
        counters.preemptions = self.scheduler.counters.preemptions
        counters.prefix_cache_queries = self.scheduler.counters.prefix_cache_queries
        counters.prefix_cache_hits = self.scheduler.counters.prefix_cache_hits
        return EngineStats(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_blocks_used=self.pool.num_used,
            kv_blocks_total=self.config.num_kv_blocks,
            counters=counters,
            kv_bytes_used=self.pool.num_used * self.cache.bytes_per_block,
            linear_state_bytes_used=(
                self.linear.slots_in_use * self.linear.bytes_per_sequence if self.linear else 0
            ),
            prefix_caching_off_reason=self.prefix_caching_off_reason,
        )

    def _run(self, batch: list[ScheduledSeq], emitted: list) -> None:
        hidden = forward_main(
            self.model, self.cache, self.linear, batch, self.counters, self._expert_tokens
        )
        prompt_logprobs.collect(self.model, batch, hidden)
        new_tokens = sample_and_commit(
            self.model,
            batch,
            hidden,
            linear=self.linear,
            counters=self.counters,
            eos_token_ids=self.eos_token_ids,
            unsafe_accept_all_drafts=self.config.unsafe_accept_all_drafts,
        )
        still_running = [item.seq for item in batch if item.seq.finish_reason is None]
        if self.drafter is not None and still_running:
            wants = [s.is_decoding for s in still_running]
            self.drafter.update(still_running, wants)
        for item in batch:
            seq = item.seq
            self._register_full_blocks(seq)
            tokens, logprobs = new_tokens.get(seq, ((), None))
            if tokens or seq.finish_reason:
                emitted.append((seq, self._output(seq, tokens, logprobs)))
            if seq.finish_reason:
                self._retire(seq)
        self.counters.steps += 1

    def _register_full_blocks(self, seq: Sequence) -> None:
        if not self.pool.enable_prefix_caching:
            return
        # A block is reusable once every position in it has committed inputs in the cache,
        # the MTP entries included when MTP is on.
        done = (
            seq.num_computed
            if self.drafter is None
            else min(seq.num_computed, seq.num_mtp_computed)
        )
        bs = self.config.block_size
        for b in range(len(seq.block_hashes), done // bs):
            parent = seq.block_hashes[-1] if seq.block_hashes else 0
            h = block_hash(parent, seq.token_ids[b * bs : (b + 1) * bs])
            seq.block_hashes.append(h)
            self.pool.register(seq.blocks[b], h)

    # -- admission and retirement ----------------------------------------------------------

    def _admit(
        self,
        inbox: list[Sequence],
        aborts: list[str],
        emitted: list[tuple[Sequence, RequestOutput]],
    ) -> None:
        for seq in inbox:
            self._live[seq.request_id] = seq
            self.scheduler.waiting.append(seq)
            self.counters.prompt_tokens += seq.prompt_len
        for request_id in aborts:
            aborted = self._live.get(request_id)
            if aborted is not None and aborted.finish_reason is None:
                aborted.finish_reason = "abort"
                emitted.append((aborted, self._output(aborted, (), None)))
                self._retire(aborted)

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self._live.pop(seq.request_id, None)
        reason = seq.finish_reason
        assert reason is not None, "a sequence is retired once it has finished"
        reasons = self.counters.finished_requests
        reasons[reason] = reasons.get(reason, 0) + 1

    def fail_all(self) -> None:
        """After an internal error: end every request with finish reason "error"."""
        emitted: list[tuple[Sequence, RequestOutput]] = []
        with self._inbox_lock:
            inbox, self._inbox, self._aborts = self._inbox, [], []
            self._request_ids.clear()
        self._admit(inbox, [], emitted)
        for seq in list(self._live.values()):
            seq.finish_reason = "error"
            emitted.append((seq, self._output(seq, (), None)))
            self._retire(seq)
        for seq, output in emitted:
            seq.on_output(output)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Seq[SamplingParams]
    ) -> list[list[int]]:
        """Run ``prompts`` to completion on the calling thread (tests and benchmarks),
        with the same ``params`` for all or one per prompt."""
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        done: set[str] = set()

        def collect(out: RequestOutput) -> None:
            outputs[out.request_id].extend(out.new_token_ids)
            if out.finished:
                done.add(out.request_id)

        base = len(self._request_ids) + self.counters.steps
        ids = [f"generate-{base}-{i}" for i in range(len(prompts))]
        outputs: dict[str, list[int]] = {rid: [] for rid in ids}
        for rid, prompt, request_params in zip(ids, prompts, each, strict=True):
            self.add_request(rid, prompt, request_params, collect)
        while len(done) < len(ids):
            if not self.step():
                raise RuntimeError("the engine scheduled nothing while requests were pending")
        return [outputs[rid] for rid in ids]

    @staticmethod
    def _output(
        seq: Sequence, tokens: Iterable[int], logprobs: Iterable[TokenLogprob] | None
    ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=tuple(tokens),
            new_logprobs=tuple(logprobs) if logprobs is not None else None,
            finish_reason=seq.finish_reason,
            prompt_tokens=seq.prompt_len,
            output_tokens=seq.num_output,
            cached_prompt_tokens=seq.cached_prompt_tokens,
            prompt_logprobs=prompt_logprobs.take(seq),
        )
