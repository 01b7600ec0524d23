#!/usr/bin/env bash
# One device session on the GPU machine, from the repo root: each step's log lands in $OUT.
#   bash bench/gpu_session.sh info tests eval roofline throughput stability cache
# Steps run in the order given; a failing step is logged and the next one runs.
set -u
OUT=${OUT:-/tmp/kbh-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBH_TEST_CACHE="$PWD/.cache/kbh"
PY=${PY:-python3}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/session.log"; }
for step in "$@"; do
  log "start $step"
  case "$step" in
    info)
      { nvidia-smi; $PY -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"; nproc; free -g; } >> "$OUT/session.log" 2>&1 ;;
    tests)
      timeout 1500 $PY -m pytest -m gpu -q -rA tests/gpu > "$OUT/gpu_tests.log" 2>&1 ;;
    eval)
      rm -rf results/gpu-bundled
      timeout 900 $PY run_eval.py configs/pack_tokens.yaml --device cuda --out results/gpu-bundled > "$OUT/eval.log" 2>&1
      cat results/gpu-bundled/summary.md >> "$OUT/eval.log" ;;
    roofline)
      timeout 900 $PY bench/roofline.py --ablations --out results/gpu-roofline > "$OUT/roofline.log" 2>&1 ;;
    throughput)
      timeout 1500 $PY bench/throughput.py > "$OUT/throughput.log" 2>&1 ;;
    stability)
      timeout 1200 $PY bench/stability.py > "$OUT/stability.log" 2>&1 ;;
    cache)
      tar czf "$OUT/cache.tgz" --exclude='*.o' --exclude='*.lock' .cache/kbh 2>> "$OUT/session.log"
      ls -la "$OUT" >> "$OUT/session.log" ;;
    runs)
      tar czf "$OUT/runs.tgz" --exclude='*.bin' results /tmp/kbh-* 2>/dev/null ;;
    *) echo "unknown step $step" >> "$OUT/session.log" ;;
  esac
  log "end $step rc=$?"
done
