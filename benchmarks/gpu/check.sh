#!/usr/bin/env bash
# The GPU checks, in one prepared script for a lent machine with one CUDA GPU (H100/H200,
# no network there): about 15 minutes of device time in all, so its steps' limits add up
# to 525 s (under 9 minutes), leaving time to run it twice.
#
#     bash benchmarks/gpu/check.sh [OUT_DIR]        (default: $OUT, else ./gpu-check)
#
# On the lent machine: run benchmarks/gpu/prepare.sh here first (the wheels its image
# lacks, into .whl/), then call the device with carry [".whl"] and the command
# `bash benchmarks/gpu/check.sh "$OUT"`, timeout_s 600.
#
# Every step writes into OUT_DIR and has its own time limit; a step that fails or runs out
# of time is recorded (its exit status in steps.tsv) and the next one runs. Steps:
#   env       the card, the driver, torch and what Python packages are installed
#   mfu       the trainer's MFU per activation policy, bf16, with torch.profiler's breakdown
#             of one step (targets/training/gpu_check.py, size gpu-large)
#   oom       training-oom on the GPU: the real CUDA OOMs each policy x skew meets under a
#             cap at 1.01x keep-all's calm peak, each scenario's peak beside the simulator's
#             (one process holds every expert here: skew moves no total, unlike on CPU,
#             where memory is the hottest of 4 expert-parallel ranks)
#   nvml      what an NVML read costs (benchmarks/telemetry_cost.py)
#   dist      training-dist over NCCL, one rank; and the two-rank layout's refusal
#   serving   not run: the reference engine has no CUDA path (targets/serving/engine
#             computes on the CPU), said in steps.tsv rather than measured on the CPU
# Without a CUDA device it stops at once with exit 2 and says so.
set -uo pipefail
cd "$(dirname "$0")/../.."

out=${1:-${OUT:-gpu-check}}
mkdir -p "$out"
python=${MOEPERF_PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    >"$out/preflight.txt" 2>&1; then
    echo "check.sh: no CUDA device here (torch.cuda.is_available() is False, or torch did" \
         "not import: $out/preflight.txt); these checks need one NVIDIA GPU" >&2
    exit 2
fi

# The wheels benchmarks/gpu/prepare.sh put in .whl/ (what the GPU image lacks), when carried.
if compgen -G ".whl/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/moeperf-site .whl/*.whl >"$out/wheels.txt" 2>&1 \
        || { echo "check.sh: installing .whl/ failed ($out/wheels.txt)" >&2; exit 2; }
    export PYTHONPATH="$PYTHONPATH:/tmp/moeperf-site"
fi

printf 'step\texit\tseconds\tnote\n' >"$out/steps.tsv"
# step NAME LIMIT_S COMMAND...: run it with its output in OUT/NAME.txt, record its exit.
step() {
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    echo "---- $name (limit ${limit} s)"
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.txt" 2>&1
    local status=$?
    local note=""
    [ "$status" -eq 124 ] && note="ran past its ${limit} s"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - started))" "$note" >>"$out/steps.tsv"
    tail -n 8 "$out/$name.txt"
}

step env 30 bash -c "nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv; \
    $python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'; \
    $python -m pip list 2>/dev/null"
step mfu 210 "$python" -m moeperf.targets.training.gpu_check --size gpu-large --steps 6 \
    --out "$out/mfu.json"
step oom 150 "$python" -m moeperf --runs-dir "$out/runs" run benchmarks/gpu/training-oom-gpu.toml
step nvml 30 "$python" benchmarks/telemetry_cost.py --seconds 3
step dist 75 "$python" -m moeperf --runs-dir "$out/runs" run benchmarks/gpu/training-dist-gpu.toml
# Two ranks on the one GPU: the spec refuses it before starting (exit 2, the reason).
step dist-two-ranks 30 "$python" -m moeperf --runs-dir "$out/runs" run \
    benchmarks/gpu/training-dist-gpu.toml --set 'matrix.layouts=[{name="ep2", ep=2}]'
printf 'serving\t-\t0\tnot run: the reference engine has no CUDA path (it computes on the CPU)\n' \
    >>"$out/steps.tsv"

echo "---- steps (exit 0 = ran; see each NAME.txt)"
column -t -s $'\t' "$out/steps.tsv" 2>/dev/null || cat "$out/steps.tsv"
echo "results: $out"
