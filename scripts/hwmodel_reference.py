#!/usr/bin/python3
"""Helpers of scripts/hwmodel_reference.sh: cachegrind sums, the instruction-coefficient fit,
and the per-op comparison of the in-order core model with the reference."""
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ["qkv", "k_transpose", "scores", "softmax", "context", "attn_out", "residual_add",
       "layernorm", "ffn_in", "gelu", "ffn_out"]


def cgsum(path, key):
    """Sums cachegrind's counts over the functions of the kernel (names with 'bertlab::')."""
    events, tot, take = None, None, False
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
                tot = [0] * len(events)
            elif line.startswith("fn="):
                take = "bertlab::" in line
            elif take and line[:1].isdigit():
                v = line.split()[1:]
                for i, x in enumerate(v):
                    tot[i] += int(x)
    c = dict(zip(events, tot))
    d1 = c.get("D1mr", 0) + c.get("D1mw", 0)
    ll = c.get("DLmr", 0) + c.get("DLmw", 0)
    # One write() of the whole line: parallel runs append to one file (O_APPEND), and print()
    # may write the text and its newline apart, interleaving two runs' lines.
    os.write(1, (" ".join(key + [str(c["Ir"]), str(d1), str(ll)]) + "\n").encode())


def model(tool, system, coeffs, op, arr, seq, S, P, modulo, stack=None):
    cmd = [tool, "model", "--op", op, "--arrangement", arr, "--seq", str(seq), "--kernel", str(S),
           "--cores", str(P), "--system", system]
    if coeffs:
        cmd += ["--coefficients", coeffs]
    if stack:
        cmd += ["--stack", ",".join(stack)]
    if modulo:
        cmd.append("--modulo")
    return json.loads(subprocess.check_output(cmd))


def read_rows(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [l.split() for l in f if l.strip()]
    return rows


def fit(path, tool, system):
    """Per (op, arrangement, S): instructions = per_unit x units + per_group x groups, solved
    from the two calibration sequence lengths."""
    meas = {}
    for r in read_rows(path):
        op, arr, seq, S = r[0], r[1], int(r[2]), int(r[3])
        meas.setdefault((op, arr, S), {})[seq] = int(r[6])
    keys = sorted(meas)
    with ThreadPoolExecutor(2) as ex:
        ev = dict(zip(keys, ex.map(lambda k: {s: model(tool, system, None, k[0], k[1], s, k[2], 1, False)
                                              for s in sorted(meas[k])}, keys)))
    entries = []
    for k in keys:
        (s1, s2) = sorted(meas[k])
        u1, g1 = ev[k][s1]["units"][0], ev[k][s1]["groups"][0]
        u2, g2 = ev[k][s2]["units"][0], ev[k][s2]["groups"][0]
        i1, i2 = meas[k][s1], meas[k][s2]
        det = u1 * g2 - u2 * g1
        if det == 0:
            a, b = (i1 + i2) / (u1 + u2), 0.0
        else:
            a, b = (i1 * g2 - i2 * g1) / det, (u1 * i2 - u2 * i1) / det
        entries.append({"op": k[0], "arrangement": k[1], "kernel": k[2], "per_unit": round(a, 4),
                        "per_group": round(b, 2)})
    print(json.dumps({"format": "bertlab-core-coefficients",
                      "what": "instructions per event of bertlab_hwref_kernel (x86-64, -O2), fitted by "
                              "scripts/hwmodel_reference.sh calibrate from cachegrind at seq 32 and 64",
                      "entries": entries}, indent=1))


GEMMS = ("qkv", "scores", "context", "attn_out", "ffn_in", "ffn_out")


def stack_sets(replay_line, tool, system):
    """One line of D/stack.txt from a lackey replay of one core ("OP ARR SEQ S {json}"): the
    non-operand lines the kernel touched at least once per group of its schedule (per tile,
    row or block: the core model's groups; for the streams, whose one group is the call, per
    step: per line), each as L1SET:TOUCHES_PER_STEP (the model's steps of the same run; above
    1 the model places the touches between the step's accesses). Rarer lines (touched per call or per head) are left out. GEMM kernels are one
    template per arrangement and S (hwmodel/reference/kernels.h), so the attention-output GEMM
    (one instance of (768 / S)^2 tiles at seq 32, so that lines touched once per call or per
    head stay below the threshold) stands for every GEMM op. Prints "OP ARR S LINES" (LINES
    comma-separated, '-' for none) per op."""
    f = replay_line.split(None, 4)
    op, arr, seq, S = f[0], f[1], int(f[2]), int(f[3])
    lines = json.loads(f[4])["other_lines"][0]
    m = model(tool, system, None, op, arr, seq, S, 1, False)
    steps = m["steps"][0]
    per = m["groups"][0] if m["groups"][0] > 1 else steps
    touched = {}
    for st, n in lines:  # two lines in one set: the more touched one
        if n >= per and n > touched.get(st, 0):
            touched[st] = n
    spec = ["%d:%.4g" % (st, n / steps) for st, n in sorted(touched.items())]
    for o in (GEMMS if op in GEMMS else (op,)):
        print("%s %s %d %s" % (o, arr, S, ",".join(spec) or "-"))


def read_stack(d):
    """D/stack.txt -> {(op, arr, S): ["SET:RATE", ..]}; S-free configurations stand for the others."""
    st = {}
    for r in read_rows(os.path.join(d, "stack.txt")):
        st[(r[0], r[1], int(r[2]))] = [] if r[3] == "-" else r[3].split(",")
    for (op, arr, S), v in list(st.items()):
        if op in S_FREE and arr == "rwma" and S == 4:
            for a in S_FREE[op]:
                for s2 in (4, 8, 16, 32):
                    st.setdefault((op, a, s2), v)
    return st


# Configurations whose kernel does not read S (and, for the first two, the arrangement):
# op -> the arrangements its one run (rwma, S = 4) stands for (scripts/hwmodel_reference.sh).
S_FREE = {"residual_add": ("rwma", "bwma"), "gelu": ("rwma", "bwma"), "k_transpose": ("rwma",),
          "softmax": ("rwma",), "layernorm": ("rwma",)}


def net(path):
    """PATH.raw -> PATH (appended): each run's counts minus those of the dry run of the same
    op, arrangement, seq and S (core field 'dry'): what runs between the markers. The program
    is the same up to the kernel call, so the difference is exactly the kernel call's."""
    raw = read_rows(path + ".raw")
    dry = {tuple(r[:4]): [int(x) for x in r[6:9]] for r in raw if r[5] == "dry"}
    with open(path, "a") as f:
        for r in raw:
            if r[5] == "dry":
                continue
            base = dry.get(tuple(r[:4]))
            if base is None:  # a run cut short: left out
                print("net: no dry run for %s, left out" % " ".join(r[:4]), file=sys.stderr)
                continue
            f.write(" ".join(r[:6] + [str(int(x) - b) for x, b in zip(r[6:9], base)]) + "\n")


def dup(path):
    """Copies the rows of the S-free configurations (run at rwma, S = 4) to the other S and
    arrangements they stand for; rows already present stay."""
    rows = read_rows(path)
    have = set(tuple(r[:4]) + tuple(r[4:6]) for r in rows)
    extra = []
    for r in rows:
        if r[0] not in S_FREE or r[1] != "rwma" or r[3] != "4":
            continue
        for arr in S_FREE[r[0]]:
            for S in ("4", "8", "16", "32"):
                key = (r[0], arr, r[2], S) + tuple(r[4:6])
                if key not in have:
                    have.add(key)
                    extra.append([r[0], arr, r[2], S] + r[4:])
    with open(path + ".tmp", "w") as f:
        for r in rows + extra:
            f.write(" ".join(r) + "\n")
    os.replace(path + ".tmp", path)


def err(model_v, ref_v):
    if ref_v == 0:
        return 0.0 if model_v == 0 else float("inf")
    return 100.0 * (model_v - ref_v) / ref_v


def model_key(k, hashed_one_core=False):
    """The key of one model run in D/models.json: "OP ARR SEQ S CORES", the run against the
    reference's cachegrind at 1 core (modulo-indexed LLC) and its replays at 2 and 4 cores
    (the paper's hashed LLC); "OP ARR SEQ S 1 hashed": the 1-core run on the hashed LLC, against
    the 1-core replay (a separate key: the modulo run stays the 1-core LLC model of cachegrind)."""
    return " ".join(map(str, k)) + (" hashed" if hashed_one_core else "")


def model_sources(start="hwmodel/reference/main.cpp"):
    """The sources of the core model's binary: its main and, transitively, every project header
    it includes ("dir/name.h") with that header's .cpp beside it."""
    seen, todo = set(), [start]
    while todo:
        p = todo.pop()
        if p in seen or not os.path.isfile(os.path.join(ROOT, p)):
            continue
        seen.add(p)
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            for inc in re.findall(r'^#include "([^"]+)"', f.read(), re.M):
                todo += [inc] + ([inc[:-2] + ".cpp"] if inc.endswith(".h") else [])
    return sorted(seen)


def model_fingerprint(system, coeffs, stack):
    """What the model's outputs depend on: its sources, the system and coefficient files and
    the measured stack lines. models.json is valid only for the fingerprint it was made with."""
    h = hashlib.sha256()
    for p in model_sources():
        with open(os.path.join(ROOT, p), "rb") as f:
            h.update(p.encode() + b"\0" + f.read())
    for path in (system, coeffs):
        if path and os.path.isfile(path):
            with open(path, "rb") as f:
                h.update(f.read())
        elif path:
            h.update(path.encode())  # not a file here (the model reports it): its name
    h.update(repr(sorted(stack.items())).encode())
    return h.hexdigest()[:16]


def compare(d, tool, system, coeffs):
    cg = {}
    for r in read_rows(os.path.join(d, "cachegrind.txt")):
        op, arr, seq, S, P, c = r[0], r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5])
        cg.setdefault((op, arr, seq, S, P), {})[c] = [int(x) for x in r[6:9]]
    rp = {}
    for r in read_rows(os.path.join(d, "replay.txt")):
        rp[(r[0], r[1], int(r[2]), int(r[3]), int(r[4]))] = json.loads(" ".join(r[5:]))
    keys = sorted(set(k for k, v in cg.items() if len(v) == k[4]) | set(rp),
                  key=lambda k: (k[2], OPS.index(k[0]), k[1], k[3], k[4]))
    # Model runs: per key the modulo-indexed LLC against cachegrind (1 core) and the paper's
    # hashed LLC against the replay (2 and 4 cores); at 1 core with a replay, a second run on
    # the hashed LLC against the replay's LLC misses and DRAM bytes.
    # The model's outputs are kept in D/models.json (a later compare reruns only new keys),
    # under the fingerprint of the model's sources and inputs: a cache made by another
    # version of the model, or on other inputs, is dropped and every run made again.
    # With D/stack.txt (scripts/hwmodel_reference.sh stack), the model gets the measured stack
    # lines of the reference binary as its stack stream (core_model.h, CoreStack).
    stack = read_stack(d)
    cache_path = os.path.join(d, "models.json")
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = json.load(f)
    fingerprint = model_fingerprint(system, coeffs, stack)
    if cache and cache.get("fingerprint") != fingerprint:
        print("%s: made by another version of the model or other inputs (fingerprint %s, now %s): "
              "running every model again" % (cache_path, cache.get("fingerprint", "none"), fingerprint),
              file=sys.stderr)
        cache = {}
    cache["fingerprint"] = fingerprint
    # (key, hashed_one_core): the modulo LLC for the plain 1-core key only.
    runs = [(k, False) for k in keys] + [(k, True) for k in keys if k[4] == 1 and k in rp]
    todo = [job for job in runs if model_key(*job) not in cache]

    def run(job):
        k, hashed_one_core = job
        modulo = k[4] == 1 and not hashed_one_core
        return model(tool, system, coeffs, *k, modulo, stack.get(k[:2] + (k[3],)))
    with ThreadPoolExecutor(2) as ex:
        for job, m in zip(todo, ex.map(run, todo)):
            cache[model_key(*job)] = m
    with open(cache_path + ".tmp", "w") as f:
        json.dump(cache, f)
    os.replace(cache_path + ".tmp", cache_path)
    models = {k: cache[model_key(k)] for k in keys}
    hashed1 = {k: cache[model_key(k, True)] for k in keys if k[4] == 1 and k in rp}
    print("| op | arr | seq | S | cores | instructions ref | model | err | L1 misses ref | model | err | "
          "LLC misses ref | model | err | DRAM bytes ref | model | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    llc1 = "LLC at 1 core, replay (hashed LLC)"
    metrics = ("instructions", "L1", "LLC", "DRAM", llc1)
    seqs = sorted(set(k[2] for k in keys))
    worst = {(m, q): (0.0, None) for m in metrics for q in seqs}
    within = {(m, q): [0, 0] for m in metrics for q in seqs}

    def cell(name, k, model_v, ref_v):
        e = err(model_v, ref_v)
        w = (name, k[2])
        within[w][1] += 1
        within[w][0] += abs(e) <= 5.0
        if abs(e) > abs(worst[w][0]):
            worst[w] = (e, k)
        return [str(ref_v), str(model_v), "%.1f%%" % e]
    for k in keys:
        m = models[k]
        cells = []
        ref = {}
        if k in cg and len(cg[k]) == k[4]:  # cachegrind on every core's share (else the replay's)
            per = cg[k]
            ref["instructions"] = sum(v[0] for v in per.values())
            ref["L1"] = sum(v[1] for v in per.values())
            if k[4] == 1:
                ref["LLC"] = per[0][2]
        if k in rp:
            ref["instructions"] = ref.get("instructions", sum(rp[k]["instructions"]))
            ref["L1"] = ref.get("L1", sum(rp[k]["l1_misses"]))
            if k[4] > 1:  # at 1 core the replay's LLC misses go to the table below
                ref["LLC"] = sum(rp[k]["llc_misses"])
            ref["DRAM"] = rp[k]["dram_bytes"]
        mv = {"instructions": sum(m["instructions"]), "L1": sum(m["l1_misses"]),
              "LLC": sum(m["llc_misses"]), "DRAM": m["dram_bytes"]}
        if k in hashed1:  # the replay's DRAM bytes against the model on the same (hashed) LLC
            mv["DRAM"] = hashed1[k]["dram_bytes"]
        for name in ("instructions", "L1", "LLC", "DRAM"):
            cells += cell(name, k, mv[name], ref[name]) if name in ref else ["-", str(mv[name]), "-"]
        print("| %s | %s | %d | %d | %d | " % k + " | ".join(cells) + " |")
    if hashed1:
        print()
        print("LLC misses at 1 core on the paper system's hashed LLC: the 1-core replay against the model on the same "
              "LLC (the table above compares cachegrind's modulo-indexed LL with the model on a modulo LLC):")
        print()
        print("| op | arr | seq | S | LLC misses replay | model (hashed) | err | LLC misses cachegrind | model (modulo) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for k in keys:
            if k not in hashed1:
                continue
            c = cell(llc1, k, sum(hashed1[k]["llc_misses"]), sum(rp[k]["llc_misses"]))
            print("| %s | %s | %d | %d | " % k[:4] + " | ".join(
                c + [str(cg[k][0][2]) if k in cg else "-", str(sum(models[k]["llc_misses"]))]) + " |")
    print()
    for (name, q), (n_ok, n) in within.items():
        if n == 0:
            continue
        w = worst[(name, q)]
        where = "%s %s seq %d S %d cores %d" % w[1] if w[1] else "-"
        print("- seq %d, %s: %d of %d within 5%%; worst %.1f%% (%s)" % (q, name, n_ok, n, w[0], where))
    cross_check(cg, rp)


def cross_check(cg, rp):
    """The replay's instructions and L1 misses against cachegrind's where both measured the
    same shares (1 core; every core count with CG_CORES="1 2 4"): the replay's counts stand in
    for cachegrind's at the core counts that cachegrind did not run."""
    both = [k for k, v in cg.items() if len(v) == k[4] and k in rp and "l1_misses" in rp[k]]
    if not both:
        return
    print()
    print("The replay (its own L1s) against cachegrind where both ran, (replay - cachegrind) / cachegrind:")
    print()
    for P in sorted(set(k[4] for k in both)):
        keys = [k for k in both if k[4] == P]
        for name, i, field in (("instructions", 0, "instructions"), ("L1 misses", 1, "l1_misses")):
            diffs = [(err(sum(rp[k][field]), sum(v[i] for v in cg[k].values())), k) for k in keys]
            e, k = max(diffs, key=lambda d: abs(d[0]))
            print("- %d core%s, %s: %d configurations, worst %.2f%% (%s %s seq %d S %d)" %
                  (P, "s" if P > 1 else "", name, len(keys), e, *k[:4]))


def ratios(d, seq):
    """Measured RWMA/BWMA ratios per op at one core (cachegrind): instructions, L1 and LL misses,
    and their cycle cost under the paper system's latencies (1 cycle per instruction, 20 per
    L1 miss; LL misses at the DRAM row-miss latency, 46 cycles, an upper bound)."""
    cg = {}
    for r in read_rows(os.path.join(d, "cachegrind.txt")):
        if int(r[2]) == seq and int(r[4]) == 1:
            cg[(r[0], r[1], int(r[3]))] = [int(x) for x in r[6:9]]
    print("| op | S | instructions RWMA | BWMA | ratio | L1 misses RWMA | BWMA | ratio | LL misses RWMA | BWMA | "
          "cycles RWMA / BWMA (instr + 20 x L1 + 46 x LL) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tot = {}
    # Only the S at which every op was measured in both arrangements (a layer's totals).
    sizes = [S for S in (4, 8, 16, 32) if all((op, a, S) in cg for op in OPS for a in ("rwma", "bwma"))]
    for op in OPS:
        for S in sizes:
            rw, bw = cg.get((op, "rwma", S)), cg.get((op, "bwma", S))
            cyc = [v[0] + 20 * v[1] + 46 * v[2] for v in (rw, bw)]
            t = tot.setdefault(S, [0, 0, 0, 0, 0, 0, 0, 0])
            t[0] += cyc[0]; t[1] += cyc[1]; t[2] += rw[0]; t[3] += bw[0]
            t[4] += rw[1]; t[5] += bw[1]; t[6] += rw[2]; t[7] += bw[2]
            print("| %s | %d | %d | %d | %.2f | %d | %d | %.2f | %d | %d | %.2f |" % (
                op, S, rw[0], bw[0], rw[0] / max(1, bw[0]), rw[1], bw[1], rw[1] / max(1, bw[1]), rw[2], bw[2],
                cyc[0] / max(1, cyc[1])))
    print()
    for S, t in sorted(tot.items()):
        # The L1-miss latency c at which these counts give the paper's 2.7x:
        # (I_r + c L1_r + 46 LL_r) = 2.7 (I_b + c L1_b + 46 LL_b).
        den = t[4] - 2.7 * t[5]
        c = (2.7 * (t[3] + 46 * t[7]) - (t[2] + 46 * t[6])) / den if den > 0 else float("inf")
        print("- S=%d, all ops of the layer once, 1 core, seq %d: measured RWMA/BWMA instructions %.2fx, "
              "L1 misses %.2fx, core cycles without the array (instructions + L1 and LL miss latencies) %.2fx; "
              "these counts give 2.7x at an L1-miss latency of %.0f cycles" % (
                  S, seq, t[2] / max(1, t[3]), t[4] / max(1, t[5]), t[0] / max(1, t[1]), c))


# --- The paper table from the measured counts (scripts/hwmodel_paper_table.sh, REFERENCE=D) ---
# Regions of the layer (hwmodel/encoder_layer.h, kLayerOpTable): residual add and layernorm
# run once after each sub-layer, so they count in both.
REGIONS = {"attention": ("qkv", "k_transpose", "scores", "softmax", "context", "attn_out",
                         "residual_add", "layernorm"),
           "FFN": ("residual_add", "layernorm", "ffn_in", "gelu", "ffn_out")}
PARTS = ("instructions", "array", "l1", "llc", "excess")  # excess: DRAM floor above the core time


class DataError(Exception):
    pass


def system_costs(path):
    """The paper system's costs, as hwmodel/core_model.cpp (op_time) charges them."""
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError("%s: cannot read the system file (%s)" % (path, e))
    try:
        clock = float(j["clock_ghz"])
        return {"clock_ghz": clock, "cpi": 1.0,  # in-order: one cycle per instruction
                "cycles_per_issue": float(j["array"]["cycles_per_issue"]),
                "llc_hit": float(j["llc"]["hit_cycles"]),
                "row_miss": float(j["dram"]["row_miss_ns"]) * clock,
                "row_hit": float(j["dram"]["row_hit_ns"]) * clock,
                "memory_parallelism": float(j.get("core", {}).get("memory_parallelism", 1)),
                "bytes_per_cycle": float(j["dram"]["peak_gbps"]) / clock,
                "line_bytes": int(j["llc"]["line_bytes"])}
    except (KeyError, TypeError, ValueError) as e:
        raise DataError("%s: missing or bad field %s" % (path, e))


def measured_counts(d, seq, ops):
    """Per (op, arr, S, cores): per-core measured counts of D at one seq: instructions and L1
    misses from cachegrind (one process per core; at 2 and 4 cores, where cachegrind ran only
    the 1-core share, from the replay's per-core counts), LLC misses and DRAM bytes from the
    shared-LLC replay (the paper system's hashed LLC; DRAM bytes are line fills and
    write-backs), at 1, 2 and 4 cores; an op without a 1-core replay takes cachegrind's LL
    misses (a modulo-indexed LL) and, for DRAM, those x the line size (fills only). Array issues
    from D/models.json (the schedule's count, as the core model counts them: cachegrind
    cannot count the inlined array stand-in)."""
    for name in ("cachegrind.txt", "replay.txt", "models.json"):
        if not os.path.exists(os.path.join(d, name)):
            raise DataError("%s: missing (expected the output of scripts/hwmodel_reference.sh measure, "
                            "replay and compare)" % os.path.join(d, name))
    cg, rp, path = {}, {}, os.path.join(d, "cachegrind.txt")
    try:
        for r in read_rows(path):
            if len(r) != 9:
                raise ValueError("expected 9 fields (op arr seq S cores core Ir D1 LL)")
            if int(r[2]) == seq and r[0] in ops:
                cg.setdefault((r[0], r[1], int(r[3]), int(r[4])), {})[int(r[5])] = [int(x) for x in r[6:9]]
        path = os.path.join(d, "replay.txt")
        for r in read_rows(path):
            if int(r[2]) == seq and r[0] in ops:
                rp[(r[0], r[1], int(r[3]), int(r[4]))] = json.loads(" ".join(r[5:]))
        path = os.path.join(d, "models.json")
        with open(path) as f:
            models = json.load(f)
    except (ValueError, IndexError) as e:
        raise DataError("%s: %s, in line %r" % (path, e, " ".join(r)) if path.endswith(".txt") else "%s: %s" % (path, e))
    out = {}
    for k in set(cg) | set(rp):
        op, arr, S, P = k
        mk = "%s %s %d %d %d" % (op, arr, seq, S, P)
        per = cg.get(k, {})
        # Instructions and L1 misses: cachegrind's processes where every core has one, else
        # (2 and 4 cores, `measure` with CG_CORES=1) the replay's per-core counts.
        if len(per) == P:
            ir_d1 = [per[c][:2] for c in range(P)]
        elif P > 1 and k in rp and "l1_misses" in rp[k]:
            ir_d1 = list(zip(rp[k]["instructions"], rp[k]["l1_misses"]))
        else:
            continue  # not completely measured: the configuration is left out
        if mk not in models or (P > 1 and k not in rp):
            continue
        cores = []
        for c in range(P):
            cores.append({"instructions": ir_d1[c][0], "l1": ir_d1[c][1], "issues": models[mk]["issues"][c],
                          "llc": rp[k]["llc_misses"][c] if k in rp else per[c][2]})
        out[k] = {"cores": cores, "dram_bytes": rp[k]["dram_bytes"] if k in rp else None,
                  "ll_fills": per[0][2] if P == 1 else None}
    return out


def op_breakdown(m, costs):
    """One op's cycles by component on its busiest core (by core time), the DRAM floor and
    the op's time (the larger of the two), as hwmodel/core_model.cpp op_time."""
    lat = costs["dram_latency"] / costs["memory_parallelism"]
    best, times = None, []
    for c in m["cores"]:
        t = {"instructions": c["instructions"] * costs["cpi"],
             "array": c["issues"] * costs["cycles_per_issue"],
             "l1": c["l1"] * costs["llc_hit"],
             "llc": c["llc"] * lat}
        t["core"] = t["instructions"] + t["array"] + t["l1"] + t["llc"]
        if best is None or t["core"] > best["core"]:
            best = t
        times.append(t["core"])
    nbytes = m["dram_bytes"] if m["dram_bytes"] is not None else m["ll_fills"] * costs["line_bytes"]
    best["bytes"] = nbytes
    best["floor"] = nbytes / costs["bytes_per_cycle"]
    best["excess"] = max(0.0, best["floor"] - best["core"])
    best["time"] = best["core"] + best["excess"]
    best["busy_cores"] = sum(t >= 0.1 * best["core"] for t in times)  # cores with work (>= 10% of the busiest)
    return best


def region_breakdown(meas, S, P, costs, ops):
    """{arr: {region: sums over the region's ops}}, or None when an op is not measured."""
    res = {}
    for arr in ("rwma", "bwma"):
        for region, members in REGIONS.items():
            x = dict.fromkeys(PARTS + ("floor", "time", "bytes"), 0.0)
            for op in members:
                if op not in ops:
                    continue
                if (op, arr, S, P) not in meas:
                    return None
                t = op_breakdown(meas[(op, arr, S, P)], costs)
                for f in x:
                    x[f] += t[f]
                if op in GEMMS:
                    g = res.setdefault(arr, {}).setdefault("gemm_cores", [P, 0])
                    g[0], g[1] = min(g[0], t["busy_cores"]), max(g[1], t["busy_cores"])
            res.setdefault(arr, {})[region] = x
    return res


def speedups(r):
    def ratio(rw, bw):  # a region without measured ops (--ops): nan
        return rw / bw if bw else float("nan")

    def layer(a):
        return r[a]["attention"]["time"] + r[a]["FFN"]["time"]
    return {"attention": ratio(r["rwma"]["attention"]["time"], r["bwma"]["attention"]["time"]),
            "FFN": ratio(r["rwma"]["FFN"]["time"], r["bwma"]["FFN"]["time"]),
            "layer": ratio(layer("rwma"), layer("bwma"))}


def solve(meas, S, P, costs, ops, param, lo, hi, target):
    """The value of costs[param] in [lo, hi] at which the measured counts give a layer speedup
    of `target` (bisection; the speedup is monotone in each cost while the busiest cores stay
    the same). "above" or "below" when the speedup stays above or below the target over all
    of [lo, hi]."""
    def f(v):
        c = dict(costs)
        c[param] = v
        return speedups(region_breakdown(meas, S, P, c, ops))["layer"] - target
    flo, fhi = f(lo), f(hi)
    if flo * fhi > 0:
        return "above" if flo > 0 else "below"
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if fm * flo > 0:
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def model_speedups(path):
    """The summary table of `bertlab_hwref table` (core model): {(S, cores): (attn, FFN, layer)}."""
    out = {}
    if path:
        with open(path) as f:
            for line in f:
                m = re.match(r"^\| (\d+) \| (\d+) \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|", line)
                if m:
                    out[(int(m.group(1)), int(m.group(2)))] = tuple(float(m.group(i)) for i in (3, 4, 5))
    return out


def breakdown_data(d, system, seq, ops=OPS, target=2.7):
    costs = system_costs(system)
    costs["dram_latency"] = costs["row_miss"]
    meas = measured_counts(d, seq, ops)
    configs, missing = [], []
    for S in (4, 8, 16, 32):
        for P in (1, 2, 4):
            r = region_breakdown(meas, S, P, costs, ops)
            if r is None:
                missing.append((S, P))
                continue
            hit = dict(costs, dram_latency=costs["row_hit"])
            no_instr = dict(costs, cpi=0.0)
            configs.append({
                "S": S, "cores": P, "regions": r, "speedup": speedups(r),
                "speedup_row_hit": speedups(region_breakdown(meas, S, P, hit, ops))["layer"],
                "speedup_free_instructions": speedups(region_breakdown(meas, S, P, no_instr, ops))["layer"],
                "need_llc_hit": solve(meas, S, P, costs, ops, "llc_hit", 0.0, 5000.0, target),
                "need_cpi": solve(meas, S, P, costs, ops, "cpi", 0.0, 10.0, target),
                "need_cycles_per_issue": solve(meas, S, P, costs, ops, "cycles_per_issue", 0.0, 10.0, target)})
    return {"seq": seq, "costs": costs, "target": target, "configs": configs, "missing": missing}


def fmt_need(v):
    return {"above": "none (above)", "below": "none (below)"}.get(v) if isinstance(v, str) else "%.3g" % v


def cores(P):
    return "%d core%s" % (P, "" if P == 1 else "s")


def breakdown(d, system, seq, model_md=None, ops=OPS):
    """Markdown: the paper table built from D's measured counts at one seq, and the explanation
    of the BWMA-over-RWMA speedups from those counts (docs/hwmodel-paper-table.md)."""
    b = breakdown_data(d, system, seq, ops)
    c, target = b["costs"], b["target"]
    model = model_speedups(model_md)
    print("Counts: instructions and L1 misses measured by cachegrind at 1 core and by the replays' per-core counts at "
          "2 and 4 cores (cachegrind per core process where it ran them); LLC misses and DRAM bytes "
          "from the shared-LLC replay of the paper system's hashed LLC at 1, 2 and 4 cores (where an op has no "
          "1-core replay: cachegrind's LL misses, a modulo-indexed LL, and for the DRAM floor those x %d bytes: "
          "line fills, no write-backs). "
          "Array instructions: the schedule's issue count as the core model counts it (weight rows, stream rows "
          "and drain rows; `issues` of %s/models.json), x cycles_per_issue = %g. Costs of %s: %g cycle per "
          "instruction, L1 miss = llc.hit_cycles = %g cycles, LLC miss = dram.row_miss_ns x clock = %g cycles "
          "(the replay records no row-hit/miss mix, so every LLC miss is charged a row miss: an upper bound; "
          "'layer, row hits' charges dram.row_hit_ns = %g cycles instead) / memory_parallelism %g, DRAM floor = "
          "bytes / %g bytes per cycle. Per op, the busiest core (by core time) and the larger of its time and "
          "the floor, summed per region, as the core model does (hwmodel/core_model.cpp, op_time)."
          % (c["line_bytes"], d, c["cycles_per_issue"], system, c["cpi"], c["llc_hit"], c["row_miss"],
             c["row_hit"], c["memory_parallelism"], c["bytes_per_cycle"]))
    print()
    if b["missing"]:
        print("Not completely measured (left out): %s." % ", ".join("S = %d, %d cores" % m for m in b["missing"]))
        print()
    print("#### Layer speedup (BWMA over RWMA) from the measured counts, and the core model's (`bertlab_hwref table "
          "--seq %d`, no stack lines, hashed LLC at every core count)" % seq)
    print()
    print("| S | cores | attention | FFN | layer | layer, row hits | model attention | model FFN | model layer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for x in b["configs"]:
        s = x["speedup"]
        m = model.get((x["S"], x["cores"]))
        mc = ["%.2fx" % v for v in m] if m else ["-"] * 3
        print("| %d | %d | %.2fx | %.2fx | %.2fx | %.2fx | %s |" % (
            x["S"], x["cores"], s["attention"], s["FFN"], s["layer"], x["speedup_row_hit"], " | ".join(mc)))
    print()
    print("#### Time per region from the measured counts, millions of cycles of the busiest core (summed over the region's ops)")
    print()
    print("| S | cores | region | arrangement | instructions | array | L1-miss stalls | LLC-miss stalls | DRAM floor | "
          "time | DRAM bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for x in b["configs"]:
        for region in REGIONS:
            for arr in ("rwma", "bwma"):
                v = x["regions"][arr][region]
                print("| %d | %d | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d |" % (
                    x["S"], x["cores"], region, arr.upper(), v["instructions"] / 1e6, v["array"] / 1e6,
                    v["l1"] / 1e6, v["llc"] / 1e6, v["floor"] / 1e6, v["time"] / 1e6, v["bytes"]))
    print()
    print("#### Where BWMA's advantage comes from: share of the RWMA - BWMA time difference per component")
    print()
    print("Difference = RWMA time - BWMA time (millions of cycles); each share = (RWMA - BWMA) of the component / "
          "the difference ('DRAM' is the floor's excess over the core time; negative: BWMA pays more there).")
    print()
    print("| S | cores | region | difference | instructions | array | L1-miss stalls | LLC-miss stalls | DRAM | "
          "L1-miss stalls RWMA / BWMA |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    l1_share = []
    for x in b["configs"]:
        for region in REGIONS:
            rw, bw = x["regions"]["rwma"][region], x["regions"]["bwma"][region]
            diff = rw["time"] - bw["time"]
            sh = ["%.0f%%" % (100.0 * (rw[p] - bw[p]) / diff) if diff else "-" for p in PARTS]
            if diff:
                l1_share.append((100.0 * (rw["l1"] - bw["l1"]) / diff, x["S"], x["cores"], region))
            print("| %d | %d | %s | %.2f | %s | %.2f |" % (x["S"], x["cores"], region, diff / 1e6, " | ".join(sh),
                                                        rw["l1"] / bw["l1"] if bw["l1"] else float("inf")))
    print()
    print("#### What the paper's %.1fx would need, solved from the measured counts" % target)
    print()
    print("Each column changes one cost of %s, the others as above, until the measured counts give a layer "
          "speedup of %.1fx ('none (above)' or '(below)': the speedup stays above or below it over the whole range "
          "searched: L1-miss latency 0-5000 cycles, cycles per instruction 0-10, cycles per array issue 0-10). 'free instructions': the layer "
          "speedup if instructions cost nothing." % (system, target))
    print()
    print("| S | cores | layer speedup | L1-miss latency (cycles) | cycles per instruction | cycles per array issue | "
          "free instructions |")
    print("|---|---|---|---|---|---|---|")
    for x in b["configs"]:
        print("| %d | %d | %.2fx | %s | %s | %s | %.2fx |" % (
            x["S"], x["cores"], x["speedup"]["layer"], fmt_need(x["need_llc_hit"]), fmt_need(x["need_cpi"]),
            fmt_need(x["need_cycles_per_issue"]), x["speedup_free_instructions"]))
    print()
    if not b["configs"]:
        return
    at = lambda x: "S = %d, %s" % (x["S"], cores(x["cores"]))
    lay = lambda x: x["speedup"]["layer"]
    lo, hi = min(b["configs"], key=lay), max(b["configs"], key=lay)
    print("- Measured layer speedup at seq %d: %.2fx (%s) to %.2fx (%s); with every LLC miss a row hit: "
          "%.2fx to %.2fx." % (seq, lay(lo), at(lo), lay(hi), at(hi), min(x["speedup_row_hit"] for x in b["configs"]),
                               max(x["speedup_row_hit"] for x in b["configs"])))
    if l1_share:
        a, z = min(l1_share), max(l1_share)
        print("- L1-miss stalls give %.0f%% (S = %d, %s, %s) to %.0f%% (S = %d, %s, %s) of the RWMA - BWMA "
              "difference; instructions most of the rest." % (a[0], a[1], cores(a[2]), a[3], z[0], z[1], cores(z[2]), z[3]))
    below = [x for x in b["configs"] if lay(x) < target]
    above = [x for x in b["configs"] if lay(x) >= target]
    if above:
        span = lambda g: "%d" % g[0] if g[0] == g[1] else "%d-%d" % tuple(g)
        print("- At or above %.1fx with the system's costs: %s (cores with work in the GEMMs, at least 10%% of "
              "the busiest core's time: RWMA / BWMA)." % (target, ", ".join(
                  "%s: %.2fx (%s / %s)" % (at(x), lay(x), span(x["regions"]["rwma"].get("gemm_cores", [0, 0])),
                                           span(x["regions"]["bwma"].get("gemm_cores", [0, 0]))) for x in above)))
    for S in sorted(set(x["S"] for x in below)):
        xs = [x for x in below if x["S"] == S]
        join = lambda f: " / ".join(f(x) for x in xs)
        l1 = lambda x: (sum(x["regions"]["rwma"][r]["l1"] for r in REGIONS) /
                        max(1.0, sum(x["regions"]["bwma"][r]["l1"] for r in REGIONS)))
        need = lambda v: "-" if isinstance(v, str) else "%.3g" % v
        print("- S = %d, %s core%s: layer %s; %.1fx needs an L1-miss latency of %s cycles (system file: "
              "llc.hit_cycles = %g; a DRAM row miss is %g cycles at %g GHz) or %s cycles per instruction (%g here; "
              "'-': no value in the range searched); the layer's L1-miss stalls RWMA / BWMA (the speedup's limit "
              "at a large L1-miss latency): %s." % (
                  S, join(lambda x: str(x["cores"])), "" if [x["cores"] for x in xs] == [1] else "s",
                  join(lambda x: "%.2fx" % lay(x)), target, join(lambda x: need(x["need_llc_hit"])), c["llc_hit"],
                  c["row_miss"], c["clock_ghz"], join(lambda x: need(x["need_cpi"])), c["cpi"],
                  join(lambda x: "%.2f" % l1(x))))
    free = max(b["configs"], key=lambda x: x["speedup_free_instructions"])
    print("- With instructions free (no per-word work on the core), the largest layer speedup is %.2fx (%s)."
          % (free["speedup_free_instructions"], at(free)))


def cachecheck(path, tolerance=5.0):
    """The table of `hwmodel_reference.sh cachecheck`: per configuration, the shared-LLC replay's
    counts (TraceSim) against the independent simulator's (tests/reference/cache_sim.py) on the
    same access stream. Returns the number of configurations whose LLC misses or DRAM lines
    differ by more than `tolerance` percent."""
    rows = []
    for line in open(path):
        # the configuration, the replay's JSON, the simulator's, times; with CACHE_FILTERED=1 also
        # the filtered hierarchy's JSON and its CPU and wall seconds
        f = line.rstrip("\n").split("\t")
        cfg, ts, py, t = f[:4]
        op, arr, seq, S, P, index = cfg.split()
        ts, py = json.loads(ts), json.loads(py)
        cpu_trace, cpu_py, wall_py, dump_bytes = (float(x) for x in t.split())
        rows.append(dict(op=op, arr=arr, seq=int(seq), S=int(S), P=int(P), index=index, ts=ts, py=py,
                         cpu_trace=cpu_trace, cpu_py=cpu_py, wall_py=wall_py, dump_bytes=dump_bytes,
                         filtered=json.loads(f[4]) if len(f) > 5 else None,
                         cpu_filtered=float(f[5].split()[0]) if len(f) > 5 else 0.0))
    rows.sort(key=lambda r: (r["P"], OPS.index(r["op"]), r["arr"], r["S"]))

    def s_label(r):  # 'all': the kernel has no S in its loop nests (hwmodel_reference.sh, canonical)
        return r["S"] if r["op"] not in ("residual_add", "gelu") and not (
            r["arr"] == "rwma" and r["op"] in ("k_transpose", "softmax", "layernorm")) else "all"

    def at(r):
        return "%s %s S=%s, %d core%s" % (r["op"], r["arr"], s_label(r), r["P"], "" if r["P"] == 1 else "s")

    metrics = [  # name, value of a count JSON, gates the check
        ("LLC misses", lambda j: sum(j["llc_misses"]), True),
        ("DRAM lines", lambda j: j["read_lines"] + j["write_lines"], True),
        ("DRAM writes", lambda j: j["write_lines"], True),
        ("L1 misses", lambda j: sum(j["l1_misses"]), False),
    ]
    per_core = [("LLC misses per core", "llc_misses"), ("L1 misses per core", "l1_misses")]
    print("| op | arr | S | cores | " + " | ".join("%s TraceSim | Python | err %%" % m for m, _, _ in metrics) +
          " | trace + replay CPU s | Python CPU s | dump MB |")
    print("|" + "---|" * (4 + 3 * len(metrics) + 3))
    worst = {m: (0.0, None) for m, _, _ in metrics + [(m, None, False) for m, _ in per_core]}
    exact = {m: 0 for m in worst}
    exact["DRAM lines per operand"] = 0  # reads and writes of every operand equal
    bad = 0
    for r in rows:
        cells, fail = [], False
        for m, f, gate in metrics:
            a, b = f(r["ts"]), f(r["py"])
            e = err(b, a)
            cells += [str(a), str(b), "%+.2f" % e]
            exact[m] += a == b
            if abs(e) > abs(worst[m][0]) or worst[m][1] is None:
                worst[m] = (e, r)
            fail |= gate and abs(e) > tolerance
        for m, k in per_core:
            es = [err(b, a) for a, b in zip(r["ts"][k], r["py"][k])] + [0.0]
            e = max(es, key=abs)
            exact[m] += r["ts"][k] == r["py"][k]
            if abs(e) > abs(worst[m][0]) or worst[m][1] is None:
                worst[m] = (e, r)
        exact["DRAM lines per operand"] += r["ts"]["operand_lines"] == r["py"]["operand_lines"]
        bad += fail
        print("| %s | %s | %s | %d | %s | %.2f | %.2f | %.0f |" % (
            r["op"], r["arr"], s_label(r), r["P"], " | ".join(cells), r["cpu_trace"], r["cpu_py"], r["dump_bytes"] / 1e6))
    n = len(rows)
    print()
    print("%d configurations (seq %s, %s LLC); err = (Python - TraceSim) / TraceSim; 'all' in S: the kernel has no S "
          "in its loop nests, one run stands for every S." % (n, ",".join(sorted({str(r["seq"]) for r in rows})),
                                                             ",".join(sorted({r["index"] for r in rows}))))
    print("- DRAM lines per operand (reads and writes): %d of %d configurations equal on every operand" % (
        exact["DRAM lines per operand"], n))
    for m in worst:
        e, r = worst[m]
        worst_s = "no difference" if e == 0 or r is None else "worst err %+.3f%% (%s)" % (e, at(r))
        print("- %s: %d of %d equal; %s" % (m, exact[m], n, worst_s))
    print("- CPU seconds: tracers + replays %.1f, Python simulator %.1f (wall %.1f); dumps %.2f GB in all" % (
        sum(r["cpu_trace"] for r in rows), sum(r["cpu_py"] for r in rows), sum(r["wall_py"] for r in rows),
        sum(r["dump_bytes"] for r in rows) / 1e9))
    print("- %d of %d configurations beyond %g%% on LLC misses, DRAM lines or DRAM writes" % (bad, n, tolerance))
    fr = [r for r in rows if r["filtered"]]
    if fr:
        print()
        print("What TraceSim's policy is worth (not a check): the same access streams through cache_sim.py "
              "--hierarchy filtered, an LLC that sees only the L1s' misses and write-backs; err = (filtered - "
              "TraceSim) / TraceSim.")
        print()
        fm = metrics[:3]
        print("| op | arr | S | cores | " + " | ".join("%s TraceSim | filtered | err %%" % m for m, _, _ in fm) + " |")
        print("|" + "---|" * (4 + 3 * len(fm)))
        fworst = {m: (0.0, None) for m, _, _ in fm}
        fsum = {m: [0, 0] for m, _, _ in fm}
        for r in fr:
            cells = []
            for m, f, _ in fm:
                a, b = f(r["ts"]), f(r["filtered"])
                e = err(b, a)
                cells += [str(a), str(b), "%+.2f" % e]
                fsum[m][0] += a
                fsum[m][1] += b
                if abs(e) > abs(fworst[m][0]) or fworst[m][1] is None:
                    fworst[m] = (e, r)
            print("| %s | %s | %s | %d | %s |" % (r["op"], r["arr"], s_label(r), r["P"], " | ".join(cells)))
        print()
        for m, _, _ in fm:
            e, r = fworst[m]
            a, b = fsum[m]
            print("- %s: worst err %+.2f%% (%s); over all %d configurations %d against %d (%+.2f%%)"
                  % (m, e, at(r), len(fr), b, a, err(b, a)))
        print("- CPU seconds of the filtered runs: %.1f" % sum(r["cpu_filtered"] for r in fr))
    return bad


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "cgsum":
        cgsum(sys.argv[2], sys.argv[3:9])
    elif cmd == "net":
        net(sys.argv[2])
    elif cmd == "dup":
        dup(sys.argv[2])
    elif cmd == "fit":
        fit(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "ratios":
        ratios(sys.argv[2], int(sys.argv[3]))
    elif cmd == "stacksets":
        stack_sets(sys.stdin.read(), sys.argv[2], sys.argv[3])
    elif cmd == "breakdown":
        # breakdown D SYSTEM SEQ [MODEL_TABLE] [--ops a,b,..] [--json]
        args = sys.argv[2:]
        as_json = "--json" in args
        ops = OPS
        if "--ops" in args:
            i = args.index("--ops")
            ops = args[i + 1].split(",")
            bad = [o for o in ops if o not in OPS]
            if bad:
                sys.exit("breakdown: --ops: unknown op %s (expected some of %s)" % (",".join(bad), ",".join(OPS)))
            del args[i:i + 2]
        args = [a for a in args if a != "--json"]
        if len(args) not in (3, 4):
            sys.exit("usage: hwmodel_reference.py breakdown D SYSTEM SEQ [MODEL_TABLE] [--ops a,b] [--json]")
        try:
            if as_json:
                print(json.dumps(breakdown_data(args[0], args[1], int(args[2]), ops), indent=1))
            else:
                breakdown(args[0], args[1], int(args[2]), args[3] if len(args) > 3 else None, ops)
        except DataError as e:
            sys.exit("breakdown: %s" % e)
    elif cmd == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "cachecheck":
        sys.exit(1 if cachecheck(sys.argv[2]) else 0)
    else:
        sys.exit("unknown command " + cmd)
