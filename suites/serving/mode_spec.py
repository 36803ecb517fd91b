"""The tables that make a serving run a kind of its own: ``[capacity]``, ``[sweep]`` and
``[sweep.fit]``, ``[interference]``, ``[mtp_ab]``, ``[deploy_sweep]`` and ``[plan]``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    field_validator,
    model_validator,
)

from moeperf.suites.spec_base import STRICT, Positive


class _Strict(BaseModel):
    model_config = STRICT


class CapacitySpec(_Strict):
    """``[capacity]``: search for the highest load level at which the SLOs below hold,
    instead of sweeping ``load.levels`` (suites/serving/capacity). Levels are streams
    (``load.mode = "concurrency"``) or requests/s (open loop); each probe is one level,
    bounded as ``[load]`` bounds a level. At least one criterion is needed."""

    # The first level probed.
    start: Positive = 4.0
    # Factor between levels while bracketing: up while probes hold, down while they fail.
    growth: Annotated[float, Field(gt=1)] = 2.0
    # The lowest level probed; if it fails, the capacity is below it.
    min_level: Positive = 1.0
    # The highest level probed; if it holds, the capacity is at least it.
    max_level: Positive = 1024.0
    # Stop bisecting at this width (streams: 1, adjacent levels).
    resolution: Positive = 1.0
    # Stop after this many probes; the bracket found so far is the answer.
    max_probes: Annotated[int, Field(ge=2)] = 12
    # Criterion: a level holds when its TTFT p99 is at most this.
    ttft_p99_s: Positive | None = None
    # Criterion: a level holds when its TPOT p99 is at most this.
    tpot_p99_s: Positive | None = None
    # Criterion: a level holds when its goodput ratio is at least this.
    # Goodput per [slo]: the fraction of measured requests that are ok and meet it.
    min_goodput_ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _criteria(self) -> CapacitySpec:
        if self.ttft_p99_s is None and self.tpot_p99_s is None and self.min_goodput_ratio is None:
            raise ValueError(
                "give at least one criterion: capacity.ttft_p99_s, capacity.tpot_p99_s or "
                "capacity.min_goodput_ratio"
            )
        if not self.min_level <= self.start <= self.max_level:
            raise ValueError(
                f"capacity.start ({self.start:g}) must lie from capacity.min_level "
                f"({self.min_level:g}) to capacity.max_level ({self.max_level:g})"
            )
        return self


class InputTokensSweep(_Strict):
    """``[sweep.input_tokens]``: the prompt lengths (tokens) every load level runs at:
    ``values`` as listed, else ``points`` lengths log-spaced from ``min`` to ``max``
    (rounded to whole tokens). ``max = "context"`` is the target's context limit less the
    output tokens: the limit /v1/models states (``max_model_len``), or ``context_tokens``
    for a target that states none. A length the context cannot hold is "not available
    from this target" in the result, and is not sent."""

    # The prompt lengths (tokens), as listed; empty: points lengths from min to max.
    values: list[Annotated[int, Field(ge=1)]] = []
    # The shortest prompt length (tokens) when values is empty.
    min: Annotated[int, Field(ge=1)] = 16
    # The longest prompt length (tokens) when values is empty; "context": the target's
    # context limit less the output tokens.
    max: Annotated[int, Field(ge=1)] | Literal["context"] = "context"
    # How many lengths, log-spaced from min to max, when values is empty.
    points: Annotated[int, Field(ge=1, le=64)] = 6
    # The target's context limit (prompt + output tokens), when /v1/models does not say.
    context_tokens: Annotated[int, Field(ge=2)] | None = None

    @model_validator(mode="after")
    def _range(self) -> InputTokensSweep:
        if self.values and len(set(self.values)) != len(self.values):
            raise ValueError("sweep.input_tokens.values lists a length twice")
        if not self.values and self.max != "context" and self.max < self.min:
            raise ValueError(
                f"sweep.input_tokens.max ({self.max}) is below sweep.input_tokens.min ({self.min})"
            )
        return self


class FitSpec(_Strict):
    """``[sweep.fit]``: at each prompt length, after its load levels, search for the most
    concurrent streams that fit: every stream's request running at once, none preempted
    (suites/serving/sweep_fit.py), bracketing from ``start`` by ``growth`` then bisection
    to one stream. Each probe holds its streams for ``probe_s`` (requests still running
    then are cancelled), judged from the target's scraped counters."""

    # The first number of streams probed.
    start: Annotated[int, Field(ge=1)] = 1
    # Factor between stream counts while bracketing.
    growth: Annotated[float, Field(gt=1)] = 2.0
    # The most streams probed; if they fit, the fit is at least that.
    max_streams: Annotated[int, Field(ge=1)] = 256
    # Stop after this many probes at one length; the bracket found so far is the answer.
    max_probes: Annotated[int, Field(ge=2)] = 10
    # How long a probe holds its streams, at least (longer when its prompts take longer to
    # prefill one after another).
    probe_s: Positive = 5.0


class SweepSpec(_Strict):
    """``[sweep]``: run every level of ``load.levels`` at each prompt length of
    ``[sweep.input_tokens]`` (the prefill and long-context suites); each (length, level)
    pair is one scenario, named "in=LENGTH c=STREAMS" (or "in=LENGTH rate=R"). With
    ``[sweep.fit]``, also how many streams of each length fit at once."""

    # The prompt lengths every load level runs at.
    input_tokens: InputTokensSweep = InputTokensSweep()
    # Set: also search, at each length, for the most concurrent streams that fit at once.
    fit: FitSpec | None = None


class InterferenceSpec(_Strict):
    """``[interference]``: prefill interference on the reference target against its
    chunked-prefill size (suites/serving/interference.py). One arm per entry of
    ``chunked_prefill_sizes`` (0: each prompt whole in one step), the target restarted
    with it; in each arm ``decode_streams`` closed-loop streams of short prompts and long
    outputs decode, first alone ("quiet") and then while long prompts arrive open loop at
    ``prefill_rate`` per second ("mixed"), each level ``duration_s`` long. The decoders'
    ITL, quiet against mixed, is the interference; the long prompts' TTFT is its price."""

    # One arm per size, the target restarted with it as its chunked_prefill_size (tokens;
    # 0: each prompt whole in one step).
    chunked_prefill_sizes: Annotated[
        list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=16)
    ] = [0, 64, 256]
    # Closed-loop decoding streams of short prompts and long outputs, in every level.
    decode_streams: Annotated[int, Field(ge=1, le=256)] = 4
    # Prompt tokens of each decoding stream's requests.
    decode_input_tokens: Annotated[int, Field(ge=1)] = 64
    # Output tokens of each decoding stream's requests.
    decode_output_tokens: Annotated[int, Field(ge=2)] = 128
    # Prompt tokens of each long prompt sent in the mixed level.
    prefill_input_tokens: Annotated[int, Field(ge=1)] = 1536
    # Long prompts per second, open loop, in the mixed level.
    prefill_rate: Positive = 2.0
    # Length of each level (quiet and mixed) of each arm.
    duration_s: Positive = 10.0

    @field_validator("chunked_prefill_sizes")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("interference.chunked_prefill_sizes lists a size twice")
        return value


class MtpAbSpec(_Strict):
    """``[mtp_ab]``: MTP off against k draft tokens, A/B (suites/serving/mtp_ab/). One arm
    per entry of ``drafts`` (the first, 0, is the control: MTP off). The reference target
    runs one target per arm, started together; a url target gives one server per arm
    (``urls``) or one shell command per arm (``hooks``) that reconfigures the one server,
    run before each of that arm's blocks (the target must then answer within
    ``hook_timeout_s``). At each level of ``load.levels`` and each decoding mode, every arm
    runs ``blocks`` times, interleaved A B C, C B A, A B C ... so drift over time hits every
    arm alike; each block is one level of ``load.duration_s``. Greedy mode also checks that
    every arm's output tokens equal MTP off's for ``equality_prompts`` prompts."""

    # Draft tokens per step of each arm; the first must be 0 (MTP off, the control).
    drafts: Annotated[
        list[Annotated[int, Field(ge=0, le=16)]], Field(min_length=2, max_length=8)
    ] = [0, 1, 2]
    # url target: one server per arm, in the order of drafts.
    urls: list[str] = []
    # url target: one shell command per arm that reconfigures target.url, run before each
    # of that arm's blocks.
    hooks: list[str] = []
    # How long a hook may run, and then how long the target has to answer after it.
    hook_timeout_s: Positive = 300.0
    # Blocks of every arm per level and mode, interleaved (A B C, C B A, ...).
    blocks: Annotated[int, Field(ge=1, le=20)] = 2
    # Decoding modes each level runs in: "greedy" (temperature 0) and "sampled"
    # (sampled_temperature).
    modes: Annotated[list[Literal["greedy", "sampled"]], Field(min_length=1)] = [
        "greedy",
        "sampled",
    ]
    # The sampled mode's temperature (greedy is 0); the [sampling] section's is not used.
    sampled_temperature: Annotated[float, Field(gt=0, le=2)] = 1.0
    # Prompts whose greedy outputs are compared across arms (0: no check).
    equality_prompts: Annotated[int, Field(ge=0, le=1024)] = 16

    @model_validator(mode="after")
    def _arms(self) -> MtpAbSpec:
        if self.drafts[0] != 0:
            raise ValueError("mtp_ab.drafts must start with 0: MTP off is the control arm")
        if len(set(self.drafts)) != len(self.drafts):
            raise ValueError("mtp_ab.drafts lists a draft count twice")
        if len(set(self.modes)) != len(self.modes):
            raise ValueError("mtp_ab.modes lists a mode twice")
        if self.urls and self.hooks:
            raise ValueError("give mtp_ab.urls (a server per arm) or mtp_ab.hooks, not both")
        for name in ("urls", "hooks"):
            given = getattr(self, name)
            if given and len(given) != len(self.drafts):
                raise ValueError(
                    f"mtp_ab.{name} needs one entry per arm of mtp_ab.drafts "
                    f"({len(self.drafts)}), got {len(given)}"
                )
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"mtp_ab.urls: {url!r} is not an http:// or https:// URL")
        return self


class PlanSpec(_Strict):
    """``[plan]``: the memory planner's prediction (suites/plan, docs/guides/memory-planning.md)
    drawn beside a sweep's measured KV usage. ``model``: a Hugging Face config.json (or a
    directory holding one); the reference target's own model when unset. The deployment:
    a DEPLOY file (``deploy``) or its fields inline (``[plan.deployment]``); on the
    reference target, unset, it is the target's own (one device, its dtype, context,
    running requests, chunk and drafts; layout "reference"), and the cache is its
    num_kv_blocks. ``block_tokens``: the target's KV block size (the reference's own when
    unset; vLLM's default is 16), so that blocks can be predicted."""

    # A Hugging Face config.json, or a directory holding one; unset: the reference
    # target's own model.
    model: str | None = None
    # A DEPLOY file describing the deployment (not with [plan.deployment]).
    deploy: str | None = None
    # The DEPLOY file's fields inline; empty and no deploy, on the reference target: the
    # target's own deployment, its num_kv_blocks the cache.
    deployment: dict[str, Any] = {}
    # The target's KV block size in tokens, so that blocks can be predicted; unset: the
    # reference target's own (other targets: no block predictions).
    block_tokens: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _one_deployment(self) -> PlanSpec:
        if self.deploy is not None and self.deployment:
            raise ValueError("give plan.deploy (a file) or [plan.deployment], not both")
        return self


# A server knob's value in a deployment sweep's grid.
GridValue = bool | int | float | str


class DeploySweepSpec(_Strict):
    """``[deploy_sweep]``: one arm per server configuration, each started, probed, loaded with
    ``load.levels`` (closed loop) and stopped, then compared under the SLO below
    (suites/serving/deploy_sweep/, docs/tutorials/deploy-sweep.md). The arms are the points
    of ``grid``: the Cartesian product of its lists (``zip``: their i-th entries together),
    each a set of ``[target.reference]`` knobs over the spec's own (the reference target) or
    the values of the ``command`` template's placeholders (a url target). ``repeats`` runs every arm
    that many times, interleaved (A B C, C B A, ...) so drift over time hits every arm alike.
    At least one criterion is needed: the SLO the capacity and the recommendation use."""

    # Knob -> the values to try: [target.reference] fields (threads, max_running_requests,
    # chunked_prefill_size, mtp_tokens, num_kv_blocks, ...).
    grid: Annotated[dict[str, Annotated[list[GridValue], Field(min_length=1)]], Field(min_length=1)]
    # The grid's lists taken together (all of one length) instead of their product.
    zip: bool = False
    # The accelerators each arm uses, for the per-accelerator figures: a number, or the
    # name of a grid knob whose value it is.
    accelerators: Annotated[int, Field(ge=1)] | str = 1
    # A url target: the server command each arm starts, with placeholders {port} (a free
    # port, picked per start), each grid knob by name, and {env:NAME} (read at launch, never
    # stored); target.url is then the URL template, {port} in it ("http://127.0.0.1:{port}").
    command: str = ""
    # A url target whose servers already run: one URL per arm, in the grid's order (the
    # grid's knobs then say what each server is: its label, the planner's check). Probed,
    # loaded and compared; never started or stopped by the sweep, so no start-up time.
    urls: list[str] = []
    # Knobs set to each level's streams (vLLM's max_num_seqs = the concurrency): every arm
    # then starts once per level, that knob at the level's streams. Not grid knobs.
    linked: list[str] = []
    # With [plan] (its deployment: the devices' memory): knob -> the deployment field it
    # sets for the memory planner's check before each start, beside the server flags it
    # knows by name (max_num_seqs, tensor_parallel_size, max_running_requests ...; suites/
    # serving/deploy_sweep/plan_check.py). An arm the planner says cannot fit is not started.
    plan_fields: dict[str, str] = {}
    # Every arm this many times, interleaved.
    repeats: Annotated[int, Field(ge=1, le=10)] = 1
    # How long an arm has to start and answer.
    startup_timeout_s: Positive = 300.0
    # Criterion: a level holds when its TTFT p99 is at most this.
    ttft_p99_s: Positive | None = None
    # Criterion: a level holds when its TPOT p99 is at most this.
    tpot_p99_s: Positive | None = None
    # Criterion: a level holds when its goodput ratio ([slo]) is at least this.
    min_goodput_ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _arms(self) -> DeploySweepSpec:
        if self.ttft_p99_s is None and self.tpot_p99_s is None and self.min_goodput_ratio is None:
            raise ValueError(
                "give at least one criterion: deploy_sweep.ttft_p99_s, deploy_sweep.tpot_p99_s "
                "or deploy_sweep.min_goodput_ratio"
            )
        lengths = {len(values) for values in self.grid.values()}
        if self.zip and len(lengths) > 1:
            raise ValueError(
                "deploy_sweep.zip takes the grid's lists together: give them one length "
                f"(got {', '.join(f'{k} {len(v)}' for k, v in self.grid.items())})"
            )
        if both := [knob for knob in self.linked if knob in self.grid]:
            raise ValueError(
                f"deploy_sweep.linked: {', '.join(both)} is a grid knob too; a linked knob "
                "takes each level's streams, so list it in one place"
            )
        if stray := [knob for knob in self.plan_fields if knob not in (*self.grid, *self.linked)]:
            raise ValueError(
                f"deploy_sweep.plan_fields: {', '.join(stray)} is not a knob of the sweep "
                f"(valid: {', '.join([*self.grid, *self.linked])})"
            )
        for knob, values in self.grid.items():
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"deploy_sweep.grid.{knob} lists a value twice")
        if isinstance(self.accelerators, str):
            named = self.grid.get(self.accelerators)
            if named is None:
                raise ValueError(
                    f"deploy_sweep.accelerators = {self.accelerators!r} names no grid knob "
                    f"(valid: a number, or one of {', '.join(self.grid)})"
                )
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in named):
                raise ValueError(
                    f"deploy_sweep.accelerators = {self.accelerators!r}: that knob's values "
                    "must be whole numbers >= 1"
                )
        if self.urls:
            self._check_urls()
        if len(self.arm_knobs()) > 64:
            raise ValueError(f"deploy_sweep.grid makes {len(self.arm_knobs())} arms; at most 64")
        return self

    def _check_urls(self) -> None:
        if self.command:
            raise ValueError(
                "give deploy_sweep.command (servers the sweep starts) or deploy_sweep.urls "
                "(servers already running), not both"
            )
        if self.linked:
            raise ValueError(
                "deploy_sweep.linked restarts each arm per level at its streams: it needs "
                "deploy_sweep.command, not deploy_sweep.urls (servers the sweep cannot restart)"
            )
        arms = len(self.arm_knobs())
        if len(self.urls) != arms:
            raise ValueError(
                f"deploy_sweep.urls needs one URL per arm of the grid ({arms}, in the grid's "
                f"order), got {len(self.urls)}"
            )
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"deploy_sweep.urls: {url!r} is not an http:// or https:// URL")

    def arm_knobs(self) -> list[dict[str, GridValue]]:
        """Each arm's knobs, in the grid's order (the last knob varies fastest)."""
        names = list(self.grid)
        if self.zip:
            count = len(next(iter(self.grid.values())))
            return [{n: self.grid[n][i] for n in names} for i in range(count)]
        arms: list[dict[str, GridValue]] = [{}]
        for name in names:
            arms = [{**arm, name: value} for arm in arms for value in self.grid[name]]
        return arms

    def accelerators_of(self, knobs: dict[str, GridValue]) -> int:
        if isinstance(self.accelerators, int):
            return self.accelerators
        return int(knobs[self.accelerators])
