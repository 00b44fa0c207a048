#!/usr/bin/env bash
# ThreadSanitizer on bertlab's threaded code (issue 14; `scripts/sanitize.sh tsan` runs this).
# Builds build-tsan (clang, -DBERTLAB_TSAN=ON: clang's OpenMP is LLVM's libomp, which TSan
# understands through its Archer tool, where GCC's libgomp is not instrumented) and runs, each
# under TSan with two threads:
#   vocab, prepare              the TBB data pipeline (documents tokenized and instances built
#                               in parallel, the tokenizer's thread-local buffers)
#   train --threads 2           OpenMP compute: kernels, the executor, the fused optimizer step;
#                               again with --no-dropout: the attention step per block of heads
#   mpirun -np 2 train          the gradient allreduce's communication thread (std::thread +
#                               MPI_THREAD_SERIALIZED), buckets overlapped with backward, fp32
#                               and bf16 on the wire
# A TSan report fails the step (exit code 66); the reports are left in build-tsan/tsan-logs/.
# Third-party reports only are suppressed, each with its reason, in tests/sanitizer/tsan.supp.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DBERTLAB_TSAN=ON \
  -DBERTLAB_NATIVE=OFF -DBERTLAB_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null || exit 2
if ! cmake --build build-tsan -j"${JOBS:-$(nproc)}" --target bertlab >build-tsan/build.log 2>&1; then
  grep -E "error" build-tsan/build.log | head -20; echo "tsan: the build failed (build-tsan/build.log)" >&2; exit 2
fi
bin=$root/build-tsan/bertlab
logs=$root/build-tsan/tsan-logs
rm -rf "$logs" && mkdir -p "$logs"
work=$(mktemp -d /tmp/bertlab_tsan.XXXXXX)
trap 'rm -rf "$work"' EXIT
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | tail -1)
[ -n "$archer" ] || { echo "tsan: libarcher.so not found (libomp-dev of LLVM: scripts/setup.sh fuzz)" >&2; exit 2; }
export OMP_TOOL_LIBRARIES=$archer  # libomp's synchronisation, as TSan happens-before edges
export TSAN_OPTIONS="exitcode=66 second_deadlock_stack=1 suppressions=$root/tests/sanitizer/tsan.supp ${TSAN_OPTIONS:-}"
corpus=$root/tests/data/corpus_small.txt
failed=0
step() {  # step NAME COMMAND...: runs it, keeps its output in $logs/NAME.log
  local name=$1; shift
  local start=$(date +%s)
  "$@" >"$logs/$name.log" 2>&1
  local status=$? reports
  reports=$(grep -c "WARNING: ThreadSanitizer" "$logs/$name.log")
  echo "tsan: $name: exit $status, $reports TSan reports, $(( $(date +%s) - start )) s"
  [ "$status" -eq 0 ] && [ "$reports" -eq 0 ] || failed=1
}
cat >"$work/config.json" <<'JSON'
{"vocab_size": 200, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 64}
JSON
train=(train --config "$work/config.json" --data "$work/data" --batch-size 2 --accum-steps 2 --max-steps 3
       --lr 1e-3 --warmup-steps 1 --log-steps 1 --eval-batches 1)
step vocab "$bin" vocab --corpus "$corpus" --vocab-size 200 --threads 2 --out "$work/vocab"
step prepare "$bin" prepare --corpus "$corpus" --vocab "$work/vocab" --seq-len 32 --dupe-factor 2 --threads 2 --out "$work/data"
step train_threads "$bin" "${train[@]}" --threads 2 --out "$work/train"
# Without dropout the executor runs each layer's scores, softmax and context as one step, the
# threads running their own oneDNN primitives on their blocks of heads at the same time.
step train_fused_attention "$bin" "${train[@]}" --threads 2 --no-dropout --out "$work/train_fused"
if command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x TSAN_OPTIONS -x OMP_TOOL_LIBRARIES "$bin")
  step mpi_overlap "${mpi[@]}" "${train[@]}" --threads 1 --bucket-mb 0.004 --out "$work/mpi"
  step mpi_bf16 "${mpi[@]}" "${train[@]}" --threads 1 --bucket-mb 0.004 --allreduce-dtype bf16 --out "$work/mpi_bf16"
else
  echo "tsan: mpirun missing (openmpi-bin): the allreduce thread was not checked" >&2; failed=1
fi
[ "$failed" -eq 0 ] && echo "tsan: clean" || echo "tsan: reports or failures: see $logs" >&2
exit $failed
