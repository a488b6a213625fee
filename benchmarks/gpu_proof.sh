#!/usr/bin/env bash
# The GPU proof: every harness workload before and after torchlint's fix, on the device, with PyTorch's
# profiler matcher (--profile), then every AdamW path (bench_optim); one table, written with the date, the
# device's name and the torch and CUDA versions to benchmarks/results/.
#
#   benchmarks/gpu_proof.sh              # on a GPU: full sizes, under 8 minutes on one H200
#   benchmarks/gpu_proof.sh --device cpu # small sizes, under 2 minutes (tests/test_gpu_proof.py runs this)
#
# Environment: PYTHON (default: python), GPU_PROOF_RESULTS (where the table goes; default
# benchmarks/results), GPU_PROOF_HARNESS_S (the harness's time limit: 320 s on CUDA, 300 s on the CPU).
# Exit code: 0, or 1 when a workload's fixed form gives different results, breaks or does not fire, or a
# step fails.
set -uo pipefail

DEVICE=cuda
if [[ "${1:-}" == "--device" ]]; then DEVICE="${2:?--device cuda|cpu}"; shift 2; fi
if [[ "$DEVICE" != cuda && "$DEVICE" != cpu ]]; then echo "gpu_proof.sh: --device cuda|cpu" >&2; exit 2; fi
PYTHON="${PYTHON:-python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="${GPU_PROOF_RESULTS:-$HERE/results}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$RESULTS"

# On a GPU each step has a time limit (killed 10 s after it, if need be), so the whole ends within 8 minutes
# however a workload behaves; a step cut short is a row of the table that says so. On the CPU the sizes keep
# it near a minute of CPU time (62 s; 3.3 minutes of wall time on the 2-core VM at load 8): the limits there
# only catch a hang.
if [[ "$DEVICE" == cuda ]]; then
  HARNESS=(--size full)
  OPTIM=(--shapes all --steps 50)
  HARNESS_LIMIT="${GPU_PROOF_HARNESS_S:-320}"
  OPTIM_LIMIT=110
else
  HARNESS=(--size small --repeats 1 --warmup 0 --no-memory)
  OPTIM=(--shapes tiny --steps 3 --warmup 1)
  HARNESS_LIMIT="${GPU_PROOF_HARNESS_S:-300}"
  OPTIM_LIMIT=60
  # One thread: torch's two spin-waiting threads on a shared, loaded 2-core machine made each workload ten
  # times slower (TL101's small loop 4.4 s instead of 0.43 s at load 9). CPU numbers prove nothing anyway.
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
fi

status=0
start=$SECONDS
echo "gpu_proof: torchlint bench --device $DEVICE ${HARNESS[*]} --profile (at most ${HARNESS_LIMIT} s)" >&2
timeout -k 10 "$HARNESS_LIMIT" "$PYTHON" -m torchlint.runtime.harness --device "$DEVICE" "${HARNESS[@]}" --profile \
  --json "$WORK/harness.json" 2>&1 | tee "$WORK/harness.txt" >&2
rc=${PIPESTATUS[0]}
((rc == 0)) || { status=1; echo "harness $rc" >> "$WORK/failed"; }

echo "gpu_proof: bench_optim --device $DEVICE ${OPTIM[*]} (at most ${OPTIM_LIMIT} s)" >&2
timeout -k 10 "$OPTIM_LIMIT" "$PYTHON" -m torchlint.runtime.bench_optim --device "$DEVICE" "${OPTIM[@]}" \
  --json "$WORK/optim.json" > "$WORK/optim.txt" 2>&1
rc=$?
((rc == 0)) || { status=1; echo "bench_optim $rc" >> "$WORK/failed"; tail -5 "$WORK/optim.txt" >&2; }

"$PYTHON" "$HERE/gpu_proof_table.py" "$WORK" "$DEVICE" "$RESULTS" "$((SECONDS - start))" || status=1
exit $status
