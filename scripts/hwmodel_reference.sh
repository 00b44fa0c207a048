#!/usr/bin/env bash
# The independent reference of the arrangement estimate (docs/hwmodel.md, "Reference"):
# runs the TiC-SAT-style kernels of one BERT-base encoder layer (bertlab_hwref_kernel) under
# valgrind and compares the in-order core model (bertlab_hwref model) with what it measures.
#
#   scripts/hwmodel_reference.sh calibrate          cachegrind instruction counts at seq 32 and
#                                                  64 -> hwmodel/reference/x86_64_coefficients.json
#   scripts/hwmodel_reference.sh measure OUT [SEQ..] cachegrind (paper caches) per op, S in
#                                                  4..32, the 1-core share (CG_CORES="1 2 4":
#                                                  also each 2- and 4-core share, one process
#                                                  per core; the replays count those too)
#                                                  (default seq 128; `measure OUT 128 512` both)
#   scripts/hwmodel_reference.sh replay OUT SEQ S CORES [OPS..]  memory traces of every core's
#                                                  share replayed together (shared LLC; CORES 1:
#                                                  one core's trace, its LLC misses and DRAM bytes
#                                                  on the paper system's hashed LLC)
#   scripts/hwmodel_reference.sh all OUT [SEQ..]   the whole reference run of one encoder
#                                                  layer: measure, then replay at every S in
#                                                  SIZES and 1/2/4 cores, JOBS replays at a time
#                                                  (default seq 128), timed as one run; like the
#                                                  coefficients, the stack lines are the committed
#                                                  ones (hwmodel/reference/measured) unless OUT
#                                                  has its own (stack OUT)
#   scripts/hwmodel_reference.sh stack OUT         the kernels' resident stack lines (their L1
#                                                  sets), from memory traces at seq 32, one
#                                                  core -> OUT/stack.txt (compare passes them
#                                                  to the model)
#   scripts/hwmodel_reference.sh restack OUT       OUT/stack.txt again from the traces' counts
#                                                  that stack keeps (OUT/stack_raw.txt), without
#                                                  tracing (after a change of the rate rule)
#   scripts/hwmodel_reference.sh speed [OP SEQ S]  the replay of one op (both arrangements, one
#                                                  core; default attn_out 32 32) under lackey and
#                                                  hwtrace: kernel instructions per CPU second
#   scripts/hwmodel_reference.sh compare OUT       model vs reference, per op (prints a table)
#   scripts/hwmodel_reference.sh cachecheck OUT [SEQ [CORES..]]  the caches of the shared-LLC
#                                                  replays checked by an independent simulator:
#                                                  every op, arrangement and S in SIZES at 2 and
#                                                  4 cores (default seq 128), the replay's access
#                                                  stream (--dump-accesses) through
#                                                  tests/reference/cache_sim.py; a table in
#                                                  OUT/cachecheck.md, non-zero exit when an LLC
#                                                  miss or DRAM line count differs by more than
#                                                  5% (docs/hwmodel-cache-check.md;
#                                                  CACHE_INDEX=modulo: the LLC modulo-indexed;
#                                                  CACHE_FILTERED=1: also the other hierarchy,
#                                                  the LLC seeing only L1 misses and
#                                                  write-backs, what the policy is worth)
#
# Configurations whose kernel does not depend on S (residual add and GELU in both
# arrangements, K transpose, softmax and layernorm in RWMA: no S in their loop nests, see
# hwmodel/reference/kernels.h) run once, at S = 4 (residual add and GELU in RWMA), and their
# counts stand for the other S (and arrangement).
#
# Environment: BUILD (default ./build), JOBS (parallel valgrind runs, default 2), SIZES (the
# kernel sizes S that measure runs, default "4 8 16 32"), TRACER (the memory tracer of replay
# and stack: hwtrace, bertlab's binary valgrind tool built into $BUILD/valgrind, default; or
# lackey, valgrind's text tracer, the same events about 10x slower), CG_CORES (the core
# counts whose shares measure runs under cachegrind, default 1: at 2 and 4 cores the
# instructions and L1 misses of the replays stand in, which agree with cachegrind's within
# 1.4% and 1.7%, see `compare`; 1 must be among them).
set -euo pipefail
BUILD=${BUILD:-./build}
JOBS=${JOBS:-2}
SIZES=${SIZES:-4 8 16 32}
CG_CORES=${CG_CORES:-1}
TRACER=${TRACER:-hwtrace}
# The hwtrace tool and links to the system's valgrind files (hwmodel/reference/valgrind); lackey
# runs from there too, so that both tracers give the program the same environment.
VGLIB=$(cd "$BUILD" && pwd)/valgrind
KERNEL=$BUILD/bertlab_hwref_kernel
TOOL=$BUILD/bertlab_hwref
# The paper system's caches and DRAM (the array-only description: no TLB and one instruction per cycle,
# as the x86-64 kernels measured here under valgrind have neither modelled).
SYSTEM=configs/systems/paper-ticsat-array.json
COEFFS=hwmodel/reference/x86_64_coefficients.json
OPS="qkv k_transpose scores softmax context attn_out residual_add layernorm ffn_in gelu ffn_out"
# The paper's caches; cachegrind accepts them as given (sets are powers of two).
CG="--tool=cachegrind --D1=32768,2,64 --LL=1048576,8,64 --I1=32768,8,64"
here=$(cd "$(dirname "$0")" && pwd)
"$here/setup.sh" reference  # valgrind

# cachegrind one run: OP ARR SEQ S CORES CORE SIM(yes|no) OUTFILE -> one line of counts of
# the kernel's functions (names with bertlab::) in OUTFILE.raw; CORE "dry": the same run
# without the kernel call (hwmodel_reference.py net subtracts it). CPU seconds (user +
# system) go to OUTFILE.cpu. A failed run prints its command and valgrind's last lines and
# returns 255, which stops xargs (and with it the measurement) instead of losing the row.
cg_one() {
  local tmp args=("$1" "$2" "$3" "$4" "$5" "$6")
  [ "$6" = dry ] && args=("$1" "$2" "$3" "$4" 1 0 dry)
  tmp=$(mktemp)
  if ! /usr/bin/time -f "%U %S" -a -o "$8.cpu" \
    valgrind $CG --cache-sim="$7" --cachegrind-out-file="$tmp" "$KERNEL" "${args[@]}" >/dev/null 2> "$tmp.err" ||
    ! /usr/bin/python3 "$here/hwmodel_reference.py" cgsum "$tmp" "$1" "$2" "$3" "$4" "$5" "$6" >> "$8.raw"; then
    echo "measure: the cachegrind run of '$KERNEL ${args[*]}' failed:" >&2
    tail -n 5 "$tmp.err" >&2
    rm -f "$tmp" "$tmp.err"
    return 255
  fi
  rm -f "$tmp" "$tmp.err"
}
export -f cg_one
export CG KERNEL here

# The configuration whose counts stand for OP ARR S (see above): prints "ARR S".
canonical() {
  case "$1:$2" in
    residual_add:* | gelu:*) echo "rwma 4" ;;
    k_transpose:rwma | softmax:rwma | layernorm:rwma) echo "rwma 4" ;;
    *) echo "$2 $3" ;;
  esac
}
# trace_core FIFO CPUFILE KERNEL-ARGS..: one core's memory trace into FIFO (TRACER), the CPU
# seconds appended to CPUFILE.
trace_core() {
  local fifo=$1 cpu=$2
  shift 2
  case "$TRACER" in
    hwtrace)
      # The program's stderr (its '#hwref' line) is copied into the trace by the tool.
      VALGRIND_LIB=$VGLIB /usr/bin/time -f "%U %S" -a -o "$cpu" \
        valgrind -q --tool=hwtrace --trace-file="$fifo" "$KERNEL" "$@" > /dev/null 2>> "$fifo.log" ;;
    lackey)
      # lackey's trace goes to the log (fd 2); the program's '#hwref' line joins it there.
      (
        if [ -d "$VGLIB" ]; then export VALGRIND_LIB=$VGLIB; fi
        /usr/bin/time -f "%U %S" -a -o "$cpu" \
          valgrind --tool=lackey --trace-mem=yes --log-fd=2 "$KERNEL" "$@" 2> "$fifo" > /dev/null
      ) ;;
  esac
}
check_tracer() {
  case "$TRACER" in
    hwtrace | lackey) ;;
    *) echo "TRACER: expected hwtrace or lackey, got '$TRACER'" >&2; exit 2 ;;
  esac
  if [ "$TRACER" = hwtrace ] && [ ! -x "$VGLIB/hwtrace-amd64-linux" ]; then
    echo "hwmodel_reference.sh: $VGLIB/hwtrace-amd64-linux is missing (cmake --build $BUILD builds it when" \
      "valgrind's tool libraries are installed); TRACER=lackey runs without it" >&2
    exit 2
  fi
}

# cc_one OP ARR SEQ S CORES INDEX ROWFILE: one configuration's traces replayed with the access
# dump, the dump through the independent simulator; one row (tab-separated: the configuration,
# the replay's JSON, the simulator's JSON, the CPU seconds of tracers + replay, the simulator's
# CPU and wall seconds and the dump's bytes; with CACHE_FILTERED=1 also the simulator's JSON for
# the filtered hierarchy and its CPU and wall seconds) into ROWFILE.
cc_one() {
  local op=$1 arr=$2 seq=$3 S=$4 P=$5 index=$6 row=$7 tmpd c fifos=() writers=() mod=() ts py t
  [ "$index" = modulo ] && mod=(--modulo)
  tmpd=$(mktemp -d)
  for ((c = 0; c < P; ++c)); do
    mkfifo "$tmpd/core$c"
    fifos+=("$tmpd/core$c")
    trace_core "$tmpd/core$c" "$tmpd/cpu" "$op" "$arr" "$seq" "$S" "$P" "$c" &
    writers+=(--writer-pid "$!")
  done
  if ! ts=$(/usr/bin/time -f "%U %S" -a -o "$tmpd/cpu" "$TOOL" replay --format "$TRACER" --op "$op" --seq "$seq" \
    --system "$SYSTEM" "${mod[@]}" --dump-accesses "$tmpd/dump" "${writers[@]}" "${fifos[@]}"); then
    echo "cachecheck: the replay of $op $arr $seq $S $P failed" >&2
    cat "$tmpd"/*.log >&2 2>/dev/null
    rm -rf "$tmpd"
    return 255
  fi
  wait
  if ! py=$(/usr/bin/time -f "%U %S %e" -o "$tmpd/pytime" /usr/bin/python3 "$here/../tests/reference/cache_sim.py" \
    "$tmpd/dump" --system "$SYSTEM" "${mod[@]}"); then
    echo "cachecheck: cache_sim.py on the dump of $op $arr $seq $S $P failed" >&2
    rm -rf "$tmpd"
    return 255
  fi
  t=$(awk '{ s += $1 + $2 } END { printf "%.2f", s }' "$tmpd/cpu")
  t="$t $(awk '{ printf "%.2f %.2f", $1 + $2, $3 }' "$tmpd/pytime") $(stat -c %s "$tmpd/dump")"
  local fl=""
  if [ "${CACHE_FILTERED:-0}" = 1 ]; then  # what TraceSim's policy is worth: the other hierarchy
    if ! fl=$(/usr/bin/time -f "%U %S %e" -o "$tmpd/fltime" /usr/bin/python3 "$here/../tests/reference/cache_sim.py" \
      "$tmpd/dump" --system "$SYSTEM" "${mod[@]}" --hierarchy filtered); then
      echo "cachecheck: cache_sim.py --hierarchy filtered on the dump of $op $arr $seq $S $P failed" >&2
      rm -rf "$tmpd"
      return 255
    fi
    fl=$(printf '\t%s\t%s' "$fl" "$(awk '{ printf "%.2f %.2f", $1 + $2, $3 }' "$tmpd/fltime")")
  fi
  printf '%s\t%s\t%s\t%s%s\n' "$op $arr $seq $S $P $index" "$ts" "$py" "$t" "$fl" > "$row"
  rm -rf "$tmpd"
}
export -f cc_one trace_core
export TRACER VGLIB KERNEL TOOL SYSTEM

GEMMS="qkv ffn_in ffn_out attn_out scores context"
ROWOPS="k_transpose softmax layernorm residual_add gelu"
cpu_total() { awk '{ s += $1 + $2 } END { printf "%.2f", s }' "$1" 2>/dev/null || echo 0; }

main() {
case "${1:-}" in
  calibrate)
    out=$(mktemp)
    for seq in 32 64; do for op in $OPS; do for arr in rwma bwma; do for S in 4 8 16 32; do
      echo "$op $arr $seq $S 1 0 no $out"
      echo "$op $arr $seq $S 1 dry no $out"
    done; done; done; done | xargs -P "$JOBS" -L 1 bash -c 'cg_one "$@"' _
    /usr/bin/python3 "$here/hwmodel_reference.py" net "$out"
    /usr/bin/python3 "$here/hwmodel_reference.py" fit "$out" "$TOOL" "$SYSTEM" > "$COEFFS.tmp"
    mv "$COEFFS.tmp" "$COEFFS"
    rm -f "$out" "$out.raw" "$out.cpu"
    echo "wrote $COEFFS"
    ;;
  measure)
    dir=$2; shift 2
    mkdir -p "$dir"
    seqs=${*:-128}
    for P in $CG_CORES; do
      case "$P" in 1 | 2 | 4) ;; *) echo "CG_CORES: expected core counts among 1 2 4, got '$CG_CORES'" >&2; exit 2 ;; esac
    done
    case " $CG_CORES " in *" 1 "*) ;; *) echo "CG_CORES: must include 1 (cachegrind's 1-core counts are the reference), got '$CG_CORES'" >&2; exit 2 ;; esac
    start=$(date +%s)
    rm -f "$dir/cachegrind.txt.cpu" "$dir/cachegrind.txt.raw"
    # Shortest first (the smaller seq, S from 32 down, row ops before GEMMs), so that a run
    # cut short still holds whole S levels.
    declare -A seen=()
    for seq in $(echo $seqs | tr ' ' '\n' | sort -n); do for S in $(echo $SIZES | tr ' ' '\n' | sort -rn); do
      for op in $ROWOPS $GEMMS; do
      for arr in rwma bwma; do
        read -r carr cS < <(canonical "$op" "$arr" "$S")
        [ -z "${seen[$op $carr $seq $cS]:-}" ] || continue
        seen[$op $carr $seq $cS]=1
        for P in $(echo $CG_CORES | tr ' ' '\n' | sort -rn); do for ((c = 0; c < P; ++c)); do
          echo "$op $carr $seq $cS $P $c yes $dir/cachegrind.txt"
        done; done
        echo "$op $carr $seq $cS 1 dry yes $dir/cachegrind.txt"
      done
    done; done; done | xargs -P "$JOBS" -L 1 bash -c 'cg_one "$@"' _
    /usr/bin/python3 "$here/hwmodel_reference.py" net "$dir/cachegrind.txt"
    /usr/bin/python3 "$here/hwmodel_reference.py" dup "$dir/cachegrind.txt"
    echo "measure: $(( $(date +%s) - start )) s wall, $(cpu_total "$dir/cachegrind.txt.cpu") CPU s (valgrind), JOBS=$JOBS, for seq $seqs" |
      tee -a "$dir/timing.txt"
    ;;
  replay)
    dir=$2 seq=$3 S0=$4 P=$5; shift 5
    check_tracer
    mkdir -p "$dir"
    ops=${*:-$OPS}
    start=$(date +%s)
    cpu=$(mktemp)
    declare -A seen=()
    for op in $ops; do for arr0 in rwma bwma; do
      read -r arr S < <(canonical "$op" "$arr0" "$S0")
      [ -z "${seen[$op $arr $S]:-}" ] || continue
      seen[$op $arr $S]=1
      grep -q "^$op $arr $seq $S $P " "$dir/replay.txt" 2>/dev/null && continue  # already replayed
      fifos=() writers=()
      tmpd=$(mktemp -d)
      for ((c = 0; c < P; ++c)); do
        mkfifo "$tmpd/core$c"
        fifos+=("$tmpd/core$c")
        trace_core "$tmpd/core$c" "$cpu" "$op" "$arr" "$seq" "$S" "$P" "$c" &
        writers+=(--writer-pid "$!")  # the replay fails at once if a tracer exits without opening its FIFO
      done
      line=$(/usr/bin/time -f "%U %S" -a -o "$cpu" "$TOOL" replay --format "$TRACER" --op "$op" --seq "$seq" \
        --system "$SYSTEM" "${writers[@]}" "${fifos[@]}") || { cat "$tmpd"/*.log >&2 2>/dev/null; rm -rf "$tmpd"; exit 1; }
      wait
      echo "$op $arr $seq $S $P $line" >> "$dir/replay.txt"
      rm -rf "$tmpd"
    done; done
    /usr/bin/python3 "$here/hwmodel_reference.py" dup "$dir/replay.txt"
    echo "replay: $(( $(date +%s) - start )) s wall, $(cpu_total "$cpu") CPU s (valgrind + replay, $TRACER), for seq $seq S $S0 cores $P ops $ops" |
      tee -a "$dir/timing.txt"
    rm -f "$cpu"
    ;;
  all)
    dir=$2; shift 2
    seqs=${*:-128}
    check_tracer
    mkdir -p "$dir"
    [ -f "$dir/stack.txt" ] || cp hwmodel/reference/measured/stack.txt hwmodel/reference/measured/stack_raw.txt "$dir/"
    start=$(date +%s)
    cpu0=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
    main measure "$dir" $seqs
    # Each replay writes its own directory (replay rewrites its replay.txt: dup), seeded with
    # the rows already replayed so that none is run twice; the new rows are merged after.
    touch "$dir/replay.txt"
    for seq in $seqs; do for S in $SIZES; do for P in 1 2 4; do
      sub="$dir/replay-$seq-$S-$P"
      mkdir -p "$sub"
      cp "$dir/replay.txt" "$sub/replay.txt"
      echo "$sub $seq $S $P"
    done; done; done | xargs -P "$JOBS" -L 1 bash -c '"$0" replay "$@" > /dev/null' "$0"
    for seq in $seqs; do for S in $SIZES; do for P in 1 2 4; do
      sub="$dir/replay-$seq-$S-$P"
      cat "$sub/replay.txt" >> "$dir/replay.txt"
      cat "$sub/timing.txt" >> "$dir/timing.txt"
      rm -rf "$sub"
    done; done; done
    awk '!seen[$0]++' "$dir/replay.txt" > "$dir/replay.txt.tmp" && mv "$dir/replay.txt.tmp" "$dir/replay.txt"
    /usr/bin/python3 "$here/hwmodel_reference.py" dup "$dir/replay.txt"
    # CPU seconds of every process the run waited for (valgrind, the replays, the scripts).
    cpu1=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
    echo "all: $(( $(date +%s) - start )) s wall, $(( (cpu1 - cpu0) / $(getconf CLK_TCK) )) CPU s," \
      "JOBS=$JOBS, SIZES=$SIZES, for seq $seqs (measure, then the replays at 1, 2 and 4 cores)" |
      tee -a "$dir/timing.txt"
    ;;
  stack)
    dir=$2
    check_tracer
    mkdir -p "$dir"
    start=$(date +%s)
    rm -f "$dir/stack.txt.tmp" "$dir/stack_raw.txt"
    declare -A seen=()
    # The attention-output GEMM (one instance, (768/S)^2 tiles at seq 32) stands for every
    # GEMM (one kernel template per arrangement and S).
    for op in attn_out $ROWOPS; do for arr0 in rwma bwma; do for S0 in 4 8 16 32; do
      read -r arr S < <(canonical "$op" "$arr0" "$S0")
      [ -z "${seen[$op $arr $S]:-}" ] || continue
      seen[$op $arr $S]=1
      tmpd=$(mktemp -d)
      mkfifo "$tmpd/core0"
      trace_core "$tmpd/core0" /dev/null "$op" "$arr" 32 "$S" 1 0 &
      line=$("$TOOL" replay --format "$TRACER" --op "$op" --seq 32 --system "$SYSTEM" --writer-pid "$!" "$tmpd/core0") ||
        { cat "$tmpd"/*.log >&2 2>/dev/null; rm -rf "$tmpd"; exit 1; }
      wait
      rm -rf "$tmpd"
      echo "$op $arr 32 $S $line" >> "$dir/stack_raw.txt"
      echo "$op $arr 32 $S $line" | /usr/bin/python3 "$here/hwmodel_reference.py" stacksets "$TOOL" "$SYSTEM" >> "$dir/stack.txt.tmp"
    done; done; done
    mv "$dir/stack.txt.tmp" "$dir/stack.txt"
    echo "stack: $(( $(date +%s) - start )) s wall" | tee -a "$dir/timing.txt"
    ;;
  restack)
    dir=$2
    rm -f "$dir/stack.txt.tmp"
    while read -r line; do
      echo "$line" | /usr/bin/python3 "$here/hwmodel_reference.py" stacksets "$TOOL" "$SYSTEM" >> "$dir/stack.txt.tmp"
    done < "$dir/stack_raw.txt"
    mv "$dir/stack.txt.tmp" "$dir/stack.txt"
    echo "restack: $dir/stack.txt from $dir/stack_raw.txt"
    ;;
  speed)
    op=${2:-attn_out} seq=${3:-32} S=${4:-32}
    for t in lackey hwtrace; do
      tmp=$(mktemp -d)
      TRACER=$t main replay "$tmp" "$seq" "$S" 1 "$op" > /dev/null
      /usr/bin/python3 - "$tmp" "$t" <<'PY'
import json, re, sys
d, tracer = sys.argv[1], sys.argv[2]
n = sum(sum(json.loads(l.split(None, 5)[5])["instructions"]) for l in open(d + "/replay.txt"))
cpu = float(re.search(r"([0-9.]+) CPU s", open(d + "/timing.txt").read()).group(1))
wall = float(re.search(r"([0-9.]+) s wall", open(d + "/timing.txt").read()).group(1))
print(f"{tracer}: {n} kernel instructions, {cpu:.2f} CPU s, {wall:.0f} s wall: {n / cpu / 1e6:.2f} M per CPU s")
PY
      rm -rf "$tmp"
    done
    ;;
  cachecheck)
    dir=$2 seq=${3:-128}
    shift $(( $# < 3 ? $# : 3 ))
    cores=${*:-2 4}
    index=${CACHE_INDEX:-hashed}
    case "$index" in hashed | modulo) ;; *) echo "CACHE_INDEX: expected hashed or modulo, got '$index'" >&2; exit 2 ;; esac
    check_tracer
    mkdir -p "$dir/cachecheck-rows"
    start=$(date +%s)
    cpu0=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
    # Largest first (S from 4 up, GEMMs before row ops), so that JOBS runs end together.
    declare -A seen=()
    for P in $cores; do for S in $(echo $SIZES | tr ' ' '\n' | sort -n); do for op in $GEMMS $ROWOPS; do
      for arr0 in rwma bwma; do
        read -r arr cS < <(canonical "$op" "$arr0" "$S")
        [ -z "${seen[$op $arr $cS $P]:-}" ] || continue
        seen[$op $arr $cS $P]=1
        row="$dir/cachecheck-rows/$op-$arr-$seq-$cS-$P-$index"
        [ -s "$row" ] && continue  # already checked
        echo "$op $arr $seq $cS $P $index $row"
      done
    done; done; done | xargs -P "$JOBS" -L 1 bash -c 'cc_one "$@"' _
    cat "$dir"/cachecheck-rows/*-"$seq"-*-"$index" > "$dir/cachecheck-$seq-$index.txt"
    cpu1=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
    echo "cachecheck: $(( $(date +%s) - start )) s wall, $(( (cpu1 - cpu0) / $(getconf CLK_TCK) )) CPU s" \
      "(tracers, replays, simulator), JOBS=$JOBS, seq $seq, SIZES=$SIZES, cores $cores, $index LLC" |
      tee -a "$dir/timing.txt"
    rc=0
    /usr/bin/python3 "$here/hwmodel_reference.py" cachecheck "$dir/cachecheck-$seq-$index.txt" > "$dir/cachecheck-$seq-$index.md" || rc=$?
    cat "$dir/cachecheck-$seq-$index.md"
    exit $rc
    ;;
  compare)
    {
      echo "# The in-order core model against the reference (generated by scripts/hwmodel_reference.sh compare)"
      echo
      echo "ref: instructions and L1 misses from cachegrind (paper caches; each run's counts minus those of the"
      echo "same run without the kernel call) at 1 core, and at 2 and 4 cores from the replays below (each core's"
      echo "trace through its own L1 of the paper's geometry; cachegrind per core process where measure ran with"
      echo "CG_CORES=\"1 2 4\"; the two are compared at the end), summed over cores; LLC misses from"
      echo "cachegrind at 1 core (modulo-indexed LL, the model then uses a modulo LLC too) and from the replay"
      echo "of memory traces (hwtrace, or lackey: the same events) into the exact simulator at 2 and 4 cores (the paper system's hashed LLC, shared; warm"
      echo "start: the kernels' stack and tables in the caches, the operands cold); DRAM bytes from the"
      echo "replay, at 1 core too (a replay of one core's trace on the same hashed LLC, against the model run on"
      echo "that LLC: a second 1-core model run, kept in models.json as 'OP ARR SEQ S 1 hashed'; the table after"
      echo "this one compares the 1-core replay's LLC misses with it). err = (model - ref) / ref. Instruction"
      echo "coefficients: hwmodel/reference/x86_64_coefficients.json"
      echo "(fitted at seq 32 and 64). The model's stack stream (hwmodel/core_model.h, CoreStack): the reference"
      echo "binary's stack lines touched at least once per tile, row or block (per line for residual add and GELU),"
      echo "with their touches per schedule step, measured by \`scripts/hwmodel_reference.sh stack\` from memory"
      echo "traces at seq 32 (listed at the end as L1 set:touches per step; above one per step, the model places"
      echo "the touches between the step's line accesses)."
      echo "A '-' in a ref column: not measured (see the run times at the end)."
      echo "The summary per seq and metric follows the tables; why the worst cases differ and what closing"
      echo "them would take: docs/hwmodel.md, \"Agreement of the core model with the reference\"."
      echo
      /usr/bin/python3 "$here/hwmodel_reference.py" compare "$2" "$TOOL" "$SYSTEM" "$COEFFS"
      echo
      if [ -f "$2/stack.txt" ]; then
        echo "The stack stream per op, arrangement and S, L1 set:touches per step (stack.txt; GEMMs share one kernel template"
        echo "per arrangement and S):"
        echo
        sed 's/^/- /' "$2/stack.txt"
        echo
      fi
      echo "Run times (this machine, 2 shared cores, under load):"
      echo
      sed 's/^/- /' "$2/timing.txt"
    } > "$2/compare.md"
    cat "$2/compare.md"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d'
    exit 2
    ;;
esac
}
main "$@"; exit
