#!/usr/bin/env bash
# One device session on the GPU machine, from the repo root; each step's log lands in $OUT.
#   DEADLINE=570 bash bench/gpu_session.sh info bundled tests throughput stability runs
#   DEADLINE=560 bash bench/gpu_session.sh info acceptance     (the acceptance gate: fresh HOME and caches)
# Steps run in the order given; a failing step is logged and the next one runs; no step runs past DEADLINE
# seconds after the start (a device command may run 600 s). `bundled` runs the bundled config, which the GPU
# tests then reuse; `cheats` tables the adversarial suite on the GPU; `launchmodes` times the launch-bound
# reference plainly in 4 processes per variant (LAUNCHMODES_VARIANTS: where its two modes come from), `layouts`
# under input layouts and both clocks within each process;
# THROUGHPUT_ARGS, STABILITY_ARGS, ROOFLINE_ARGS, DRAWS_ARGS, LAYOUTS_ARGS and CHEATS_ARGS pass arguments on.
set -u
OUT=${OUT:-/tmp/kbh-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBH_TEST_CACHE="$PWD/.cache/kbh"
PY=${PY:-python3}
START=$(date +%s)
DEADLINE=${DEADLINE:-570}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
log() { echo "== $(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s $*" | tee -a "$OUT/session.log"; }
for step in "$@"; do
  t=$(left)
  if [ "$t" -lt 15 ]; then log "skip $step (deadline)"; continue; fi
  log "start $step (${t}s left)"
  case "$step" in
    info)
      { nvidia-smi; $PY -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
        nproc; free -g; git log --oneline -1; } >> "$OUT/session.log" 2>&1 ;;
    bundled)
      rm -rf results/gpu-bundled
      timeout "$t" $PY run_eval.py configs/pack_tokens.yaml --device cuda --out results/gpu-bundled > "$OUT/bundled.log" 2>&1
      cat results/gpu-bundled/summary.md >> "$OUT/bundled.log"
      export KBH_BUNDLED_RUN="$PWD/results/gpu-bundled" ;;
    tests)
      timeout "$t" $PY -m pytest -m gpu -q -rA tests/gpu ${TESTS_ARGS:-} > "$OUT/gpu_tests.log" 2>&1 ;;
    throughput)
      timeout "$t" $PY bench/throughput.py ${THROUGHPUT_ARGS:-} > "$OUT/throughput.log" 2>&1 ;;
    stability)
      timeout $(( t - 10 )) $PY bench/stability.py ${STABILITY_ARGS:-} > "$OUT/stability.log" 2>&1 ;;
    roofline)
      timeout "$t" $PY bench/roofline.py ${ROOFLINE_ARGS:---run results/gpu-bundled} > "$OUT/roofline.log" 2>&1 ;;
    suite)
      timeout "$t" $PY bench/suite.py ${SUITE_ARGS:-} > "$OUT/suite.log" 2>&1 ;;
    launchmodes)
      timeout "$t" $PY bench/reftime.py --plain-only launch_ops --variants "${LAUNCHMODES_VARIANTS:-plain,held,refill}" \
        --processes 4 --runs 200 > "$OUT/launchmodes.log" 2>&1 ;;
    layouts)
      timeout "$t" $PY bench/layouts.py ${LAYOUTS_ARGS:-} > "$OUT/layouts.log" 2>&1 ;;
    draws)
      timeout "$t" $PY bench/draws.py ${DRAWS_ARGS:-cost} > "$OUT/draws.log" 2>&1 ;;
    cheats)
      timeout "$t" $PY bench/cheats.py --device cuda --out /tmp/kbh-cheats ${CHEATS_ARGS:-} > "$OUT/cheats.log" 2>&1
      tail -1 "$OUT/cheats.log" | tee -a "$OUT/session.log" ;;
    acceptance)
      timeout "$t" $PY bench/acceptance.py --deadline $(( t - 10 )) --out /tmp/kbh-acceptance ${ACCEPTANCE_ARGS:-} \
        > "$OUT/acceptance.log" 2>&1
      rc=$?
      tail -1 "$OUT/acceptance.log" | tee -a "$OUT/session.log"
      tar czf "$OUT/acceptance.tgz" --exclude='*.bin' --exclude='*.so' --exclude='*.o' -C /tmp kbh-acceptance 2>/dev/null
      (exit $rc) ;;
    runs)
      tar czf "$OUT/runs.tgz" --exclude='*.bin' results 2>/dev/null ;;
    *) echo "unknown step $step" >> "$OUT/session.log" ;;
  esac
  log "end $step rc=$?"
done
ls -la "$OUT" >> "$OUT/session.log"
