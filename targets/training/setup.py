"""What a training run is made of, built from a ``TrainerConfig``: model, data, budget,
activation policy, routing-skew profile and the FLOPs per token for MFU."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from moeperf.targets.model.checkpoint import default_model_dir, load_mixtral_dir
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.corpus import load_corpus
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.tokenizer import ChatTokenizer
from moeperf.targets.model.train_data import split_documents, token_stream
from moeperf.targets.model.train_optim import lr_at
from moeperf.targets.model.train_recipe import TrainRecipe
from moeperf.targets.training import flops, memory, memory_calibrate, skew, skew_fit
from moeperf.targets.training.cost_model import calibrate_costs
from moeperf.targets.training.expert_parallel import HottestExpertRank
from moeperf.targets.training.policies import (
    POLICY_NAMES,
    AdaptivePolicy,
    FullRecompute,
    KeepAll,
    SelectiveRecompute,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_CALIBRATION_SAMPLE = 2**40  # far beyond any training sample index


class TrainingConfigError(ValueError):
    """A training configuration that cannot run (the message says what is valid)."""


@dataclass(frozen=True)
class TrainerConfig:
    model: MoEConfig = field(default_factory=lambda: MoEConfig(mtp_depth=1))
    init_from: str | None = "default"  # a model directory, "default" (the shipped one) or None
    # Tokens per training sequence (at most the model's max_position).
    seq_len: int = 256
    micro_batch_size: int = 4  # sequences per micro-batch
    microbatches: int = 4  # per optimizer step (gradient accumulation)
    # Optimizer steps to train.
    steps: int = 20
    # Peak learning rate: linear warm-up to it, then cosine decay.
    lr: float = 3e-4
    # Steps of linear learning-rate warm-up.
    warmup_steps: int = 0
    mtp: bool = True  # train the MTP module too (its loss weighted as in targets.model.train)
    # The dtype of the weights and the computation: float32 or bfloat16.
    dtype: str = "float32"
    # "cpu" (an accounted memory budget) or "cuda" (the real allocator, capped).
    device: str = "cpu"
    # Torch intra-op threads.
    threads: int = 2
    policy: str = "keep-all"
    budget_bytes: int | None = None  # device-memory budget; None: unlimited
    # Stages of the 1F1B pipeline whose memory is emulated: stage i keeps the activations
    # of min(pipeline_stages - i, microbatches) micro-batches alive before its first backward.
    pipeline_stages: int = 1
    # Which pipeline stage (from 0) this trainer emulates.
    stage: int = 0
    expert_parallel: int = 4  # ranks the experts are spread over (this device: the hottest)
    skew: str = "none"
    # Seed of the calm and spiky routing-skew draws.
    skew_seed: int = 0
    # Skew "replay": a JSONL file of tokens per expert per layer, one micro-batch a line,
    # looped.
    replay_path: str | None = None
    # A saved int64 tensor of training tokens (torch.save), instead of tokenizing the
    # corpus here: for machines without the tokenizer libraries, and to skip the work.
    token_stream_path: str | None = None
    # Steps between checkpoints (model and optimizer); an OOM replays the steps since the
    # last one.
    checkpoint_every: int = 5
    max_restarts: int = 100  # then the job gives up (TrainingAbortedError), as a real one would
    checkpoint_dir: str = "checkpoints"
    # Torch's seed (a random model's weights) and the micro-batches' draws from the data.
    seed: int = 0
    rank: int = 0
    world_size: int = 1

    def validate(self) -> None:
        problems = []
        if self.policy not in POLICY_NAMES:
            problems.append(f"unknown policy {self.policy!r}; valid: {', '.join(POLICY_NAMES)}")
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.device not in ("cpu", "cuda"):
            problems.append(f"device must be cpu or cuda, not {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            problems.append("device is cuda but torch sees no GPU")
        if self.expert_parallel < 1 or self.model.num_experts % self.expert_parallel:
            problems.append(f"expert_parallel must divide num_experts ({self.model.num_experts})")
        if not 0 <= self.stage < self.pipeline_stages:
            problems.append(f"stage must be in [0, pipeline_stages={self.pipeline_stages})")
        for name in ("seq_len", "micro_batch_size", "microbatches", "steps", "checkpoint_every"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.seq_len > self.model.max_position:
            problems.append(
                f"seq_len must be <= the model's max_position {self.model.max_position}"
            )
        if problems:
            raise TrainingConfigError("; ".join(problems))


@dataclass
class TrainingSetup:
    config: TrainerConfig
    recipe: TrainRecipe
    model: MoETransformer
    stream: Tensor  # training tokens
    budget: memory.AccountedBudget | memory.CudaBudget
    policy: HottestExpertRank
    skew: skew_fit.SkewHandle
    flops_per_token: float
    working_set: memory_calibrate.WorkingSetCalibration | None = None

    def batch(self, sample: int) -> tuple[Tensor, Tensor]:
        """Micro-batch ``sample``: the same windows every time (a replayed step after a
        restart trains on the same data)."""
        cfg = self.config
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + sample)
        high = len(self.stream) - cfg.seq_len - 1
        starts = torch.randint(high, (cfg.micro_batch_size,), generator=generator).tolist()
        windows = torch.stack([self.stream[s : s + cfg.seq_len + 1] for s in starts])
        windows = windows.to(cfg.device)
        return windows[:, :-1], windows[:, 1:]

    def set_lr(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, self.recipe)


def build(config: TrainerConfig) -> TrainingSetup:
    config.validate()
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    model, tokenizer = _model(config)
    model_cfg = model.config
    if not config.mtp and model_cfg.mtp_depth:
        model = _without_mtp(model)
        model_cfg = model.config
    recipe = TrainRecipe(
        model=model_cfg, seq_len=config.seq_len, batch_size=config.micro_batch_size,
        steps=config.steps, lr=config.lr, warmup_steps=config.warmup_steps,
        mtp_loss_weight=0.3 if config.mtp else 0.0, dtype=config.dtype, threads=config.threads,
    )  # fmt: skip
    if config.token_stream_path is not None:
        stream = torch.load(config.token_stream_path, weights_only=True)
    else:
        assert tokenizer is not None, "_model loads the tokenizer when no token stream is given"
        stream = training_stream(tokenizer)
    model = model.to(device=config.device, dtype=DTYPES[config.dtype]).train()
    static = memory.training_static_bytes(model).total_bytes
    if config.budget_bytes is not None and config.budget_bytes <= static:
        raise TrainingConfigError(
            f"budget_bytes {config.budget_bytes:,} is smaller than the weights, gradients and "
            f"optimizer state alone ({static:,} bytes); give at least that plus activations"
        )
    budget = _budget(config, model)
    profile = skew.profile_by_name(config.skew, config.skew_seed, config.replay_path, model_cfg)
    handle = skew_fit.install(model, profile)
    # The policy is chosen once the setup exists (the adaptive one calibrates on its
    # batches); keep-all stands in until then.
    placeholder = HottestExpertRank(KeepAll(), config.expert_parallel, model_cfg.num_experts)
    setup = TrainingSetup(
        config=config, recipe=recipe, model=model, stream=stream, budget=budget,
        policy=placeholder, skew=handle,
        flops_per_token=flops.training_flops_per_token(model_cfg, config.seq_len, config.mtp),
    )  # fmt: skip
    setup.policy = HottestExpertRank(_policy(setup), config.expert_parallel, model_cfg.num_experts)
    if isinstance(budget, memory.AccountedBudget):
        setup.working_set = _calibrate_working_set(setup)
        budget.set_working_set(setup.working_set.working_set_bytes)
    model.set_runner(setup.policy)
    return setup


def _calibrate_working_set(setup: TrainingSetup) -> memory_calibrate.WorkingSetCalibration:
    """Transient bytes of one micro-batch's forward and backward under this policy (the
    adaptive one measured as selective: the most it recomputes), off the budget."""
    model = setup.model
    policy = setup.policy
    if isinstance(policy.policy, AdaptivePolicy):
        policy = HottestExpertRank(
            SelectiveRecompute(), policy.ep_size, policy.experts_per_rank * policy.ep_size
        )
    model.set_runner(policy)
    x, y = setup.batch(_CALIBRATION_SAMPLE)
    try:
        with setup.skew.at_microbatch(_CALIBRATION_SAMPLE):
            calibration = memory_calibrate.calibrate_working_set(model, lambda: model(x, y).loss)
    finally:
        model.zero_grad(set_to_none=True)
    return calibration


def _model(config: TrainerConfig) -> tuple[MoETransformer, ChatTokenizer | None]:
    if config.init_from is None:
        tokenizer = None
        if config.token_stream_path is None:
            tokenizer = ChatTokenizer.from_dir(default_model_dir())
        return MoETransformer(config.model), tokenizer
    path = default_model_dir() if config.init_from == "default" else Path(config.init_from)
    return load_mixtral_dir(path)


def training_stream(tokenizer: ChatTokenizer) -> Tensor:
    """The training split of the corpus as one token stream (what the trainer draws from).

    Tokenized once per tokenizer in a process (about 1 s; a run builds a setup per
    scenario). Trainers only read windows of it, so they share the one tensor.
    """
    vocab = hashlib.sha256(tokenizer.tokenizer.to_str().encode("utf-8")).hexdigest()
    if vocab not in _STREAMS:
        train_docs, _ = split_documents(load_corpus(), TrainRecipe.eval_fraction)
        _STREAMS[vocab] = token_stream(train_docs, tokenizer)
    return _STREAMS[vocab]


_STREAMS: dict[str, Tensor] = {}  # by the sha256 of the tokenizer's serialized form


def _without_mtp(model: MoETransformer) -> MoETransformer:
    smaller = MoETransformer(replace(model.config, mtp_depth=0))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("mtp.")}
    smaller.load_state_dict(state)
    return smaller


def _budget(
    config: TrainerConfig, model: MoETransformer
) -> memory.AccountedBudget | memory.CudaBudget:
    if config.device == "cuda":
        return memory.CudaBudget(config.budget_bytes, torch.device("cuda"))
    return memory.AccountedBudget(config.budget_bytes)


def _policy(setup: TrainingSetup) -> KeepAll | AdaptivePolicy:
    name = setup.config.policy
    if name == "keep-all":
        return KeepAll()
    if name == "full-recompute":
        return FullRecompute()
    if name == "selective":
        return SelectiveRecompute()
    cfg = setup.config
    x, y = setup.batch(_CALIBRATION_SAMPLE)
    with setup.budget.track():
        cost = calibrate_costs(setup.model, setup.budget, x, y, lambda out: out.loss)
    return AdaptivePolicy(
        budget=setup.budget,
        cost=cost,
        num_blocks=setup.model.num_slots,
        tokens_per_microbatch=cfg.micro_batch_size * cfg.seq_len,
        top_k=setup.model.config.top_k,
    )
