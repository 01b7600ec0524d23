#!/usr/bin/env bash
# One device session on the GPU machine, from the repo root: each step's log lands in $OUT.
#   DEADLINE=570 bash bench/gpu_session.sh info build eval cache tests runs
# (`bundled` runs the config's own solutions, the run the GPU tests reuse; `eval` runs EVAL_SOLUTIONS)
# ABLATIONS names the bench/variants.py ablations to build and time (default: all).
# Steps run in the order given; a failing step is logged and the next one runs; no step runs past
# DEADLINE seconds after the start (the device tool's limit is 600 s a command).
set -u
OUT=${OUT:-/tmp/kbh-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBH_TEST_CACHE="$PWD/.cache/kbh"
PY=${PY:-python3}
START=$(date +%s)
DEADLINE=${DEADLINE:-570}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
ablations() { rm -rf .cache/ablations; $PY bench/variants.py .cache/ablations --ablations ${ABLATIONS:-} > /dev/null; }
log() { echo "== $(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s $*" | tee -a "$OUT/session.log"; }
ALL_CUDA="solutions/pack_tokens/original_warp_float4.py solutions/pack_tokens/fast_vec16.py tests/candidates/gpu"
for step in "$@"; do
  t=$(left)
  if [ "$t" -lt 15 ]; then log "skip $step (deadline)"; continue; fi
  log "start $step (${t}s left)"
  case "$step" in
    clocklog)
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw,pstate --format=csv -lms 250 \
        > "$OUT/clocks.csv" 2>&1 &
      ;;
    probe)
      timeout "$t" $PY bench/clock_probe.py ${PROBE_ARGS:-} > "$OUT/probe.log" 2>&1 ;;
    tests_variants)
      for v in ${VARIANT_TESTS:-}; do
        t=$(left)
        KBH_KERNEL="$v" timeout "$t" $PY -m pytest -m gpu -q -rA tests/gpu/test_fast_kernel.py \
          > "$OUT/gpu_tests_$(basename "$v" .py).log" 2>&1
        log "tests on $v rc=$?"
      done ;;
    info)
      { nvidia-smi; $PY -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"; nproc; free -g; df -h /dev/shm /tmp .; } >> "$OUT/session.log" 2>&1 ;;
    build)
      ablations
      timeout "$t" $PY run_eval.py configs/pack_tokens.yaml --device cuda --build-only --out results/gpu-build \
        --solution $ALL_CUDA .cache/ablations > "$OUT/build.log" 2>&1 ;;
    explore)
      ablations
      timeout "$t" $PY run_eval.py configs/pack_tokens.yaml --device cuda --build-only --out results/gpu-explore \
        --solution solutions/pack_tokens/fast_vec16.py .cache/ablations > "$OUT/explore.log" 2>&1
      t=$(left)
      timeout "$t" $PY bench/kernel_time.py solutions/pack_tokens/fast_vec16.py .cache/ablations/*.py \
        ${KERNEL_ARGS:-} >> "$OUT/explore.log" 2>&1 ;;
    tests)
      timeout "$t" $PY -m pytest -m gpu -q -rA tests/gpu > "$OUT/gpu_tests.log" 2>&1 ;;
    tests_kernel)
      timeout "$t" $PY -m pytest -m gpu -q -rA tests/gpu/test_fast_kernel.py > "$OUT/gpu_tests_kernel.log" 2>&1 ;;
    tests_harness)
      timeout "$t" $PY -m pytest -m gpu -q -rA tests/gpu/test_gpu_harness.py ${TESTS_ARGS:-} > "$OUT/gpu_tests_harness.log" 2>&1 ;;
    eval)
      rm -rf results/gpu-bundled; ablations
      timeout "$t" $PY run_eval.py configs/pack_tokens.yaml --device cuda --out results/gpu-bundled \
        --solution ${EVAL_SOLUTIONS:-solutions/pack_tokens/original_warp_float4.py solutions/pack_tokens/fast_vec16.py .cache/ablations} \
        ${EVAL_ARGS:-} > "$OUT/eval.log" 2>&1
      cat results/gpu-bundled/summary.md >> "$OUT/eval.log"
      # the GPU tests may reuse this run only when it is the whole bundled run they expect
      if [ -z "${EVAL_SOLUTIONS:-}${EVAL_ARGS:-}" ]; then export KBH_BUNDLED_RUN="$PWD/results/gpu-bundled"; fi ;;
    bundled)
      rm -rf results/gpu-bundled
      timeout "$t" $PY run_eval.py configs/pack_tokens.yaml --device cuda --out results/gpu-bundled > "$OUT/eval.log" 2>&1
      cat results/gpu-bundled/summary.md >> "$OUT/eval.log"
      export KBH_BUNDLED_RUN="$PWD/results/gpu-bundled" ;;
    buildsplit)
      timeout "$t" $PY bench/build_split.py ${BUILDSPLIT_ARGS:-} > "$OUT/build_split.log" 2>&1 ;;
    drawcost)
      timeout "$t" $PY bench/draw_cost.py ${DRAWCOST_ARGS:-} > "$OUT/draw_cost.log" 2>&1 ;;
    drawrepeat)
      timeout "$t" $PY bench/draw_repeat.py ${DRAWREPEAT_ARGS:-} > "$OUT/draw_repeat.log" 2>&1 ;;
    feedcost)
      timeout "$t" $PY bench/feed_cost.py ${FEEDCOST_ARGS:-} > "$OUT/feed_cost.log" 2>&1 ;;
    offset)
      timeout "$t" $PY bench/process_offset.py ${OFFSET_ARGS:-} > "$OUT/offset.log" 2>&1 ;;
    overhead)
      timeout "$t" $PY bench/overhead.py ${OVERHEAD_ARGS:-} > "$OUT/overhead.log" 2>&1 ;;
    roofline)
      $PY bench/roofline.py --run results/gpu-bundled > "$OUT/roofline.log" 2>&1 ;;
    throughput)
      timeout "$t" $PY bench/throughput.py ${THROUGHPUT_ARGS:-} > "$OUT/throughput.log" 2>&1 ;;
    phases)
      timeout "$t" $PY bench/stability.py --shapes seed wide mixtral --runs 1 --rounds 30 --budget 12 \
        --out results/phases > "$OUT/phases.log" 2>&1 ;;
    stability)
      timeout $(( t - 20 )) $PY bench/stability.py ${STABILITY_ARGS:-} > "$OUT/stability${TAG:-}.log" 2>&1 ;;
    cache)
      tar czf "$OUT/cache.tgz" --exclude='*.o' --exclude='*.lock' .cache 2>> "$OUT/session.log" ;;
    runs)
      tar czf "$OUT/runs.tgz" --exclude='*.bin' results 2>/dev/null ;;
    *) echo "unknown step $step" >> "$OUT/session.log" ;;
  esac
  log "end $step rc=$?"
done
ls -la "$OUT" >> "$OUT/session.log"
jobs -p | xargs -r kill 2>/dev/null; true
