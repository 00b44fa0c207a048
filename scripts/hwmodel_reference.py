#!/usr/bin/python3
"""Helpers of scripts/hwmodel_reference.sh: cachegrind sums, the instruction-coefficient fit,
and the per-op comparison of the in-order core model with the reference."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

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
    print(" ".join(key + [str(c["Ir"]), str(d1), str(ll)]))


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
    # One model run per key: modulo-indexed LLC against cachegrind (1 core), the paper's
    # hashed LLC against the replay (2 and 4 cores).
    # The model's outputs are kept in D/models.json (a later compare reruns only new keys);
    # delete it after changing the model.
    # With D/stack.txt (scripts/hwmodel_reference.sh stack), the model gets the measured stack
    # lines of the reference binary as its stack stream (core_model.h, CoreStack).
    stack = read_stack(d)
    cache_path = os.path.join(d, "models.json")
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = json.load(f)
    todo = [k for k in keys if " ".join(map(str, k)) not in cache]
    with ThreadPoolExecutor(2) as ex:
        for k, m in zip(todo, ex.map(lambda k: model(tool, system, coeffs, *k, k[4] == 1, stack.get(k[:2] + (k[3],))), todo)):
            cache[" ".join(map(str, k))] = m
    with open(cache_path + ".tmp", "w") as f:
        json.dump(cache, f)
    os.replace(cache_path + ".tmp", cache_path)
    models = {k: cache[" ".join(map(str, k))] for k in keys}
    print("| op | arr | seq | S | cores | instructions ref | model | err | L1 misses ref | model | err | "
          "LLC misses ref | model | err | DRAM bytes ref | model | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    metrics = ("instructions", "L1", "LLC", "DRAM")
    seqs = sorted(set(k[2] for k in keys))
    worst = {(m, q): (0.0, None) for m in metrics for q in seqs}
    within = {(m, q): [0, 0] for m in metrics for q in seqs}
    for k in keys:
        m = models[k]
        cells = []
        ref = {}
        if k in cg:
            per = cg[k]
            ref["instructions"] = sum(v[0] for v in per.values())
            ref["L1"] = sum(v[1] for v in per.values())
            if k[4] == 1:
                ref["LLC"] = per[0][2]
        if k in rp:
            ref["instructions"] = ref.get("instructions", sum(rp[k]["instructions"]))
            ref["L1"] = ref.get("L1", sum(rp[k]["l1_misses"]))
            ref["LLC"] = sum(rp[k]["llc_misses"])
            ref["DRAM"] = rp[k]["dram_bytes"]
        mv = {"instructions": sum(m["instructions"]), "L1": sum(m["l1_misses"]),
              "LLC": sum(m["llc_misses"]), "DRAM": m["dram_bytes"]}
        for name in ("instructions", "L1", "LLC", "DRAM"):
            if name not in ref:
                cells += ["-", str(mv[name]), "-"]
                continue
            e = err(mv[name], ref[name])
            cells += [str(ref[name]), str(mv[name]), "%.1f%%" % e]
            w = (name, k[2])
            within[w][1] += 1
            within[w][0] += abs(e) <= 5.0
            if abs(e) > abs(worst[w][0]):
                worst[w] = (e, k)
        print("| %s | %s | %d | %d | %d | " % k + " | ".join(cells) + " |")
    print()
    for (name, q), (n_ok, n) in within.items():
        if n == 0:
            continue
        w = worst[(name, q)]
        where = "%s %s seq %d S %d cores %d" % w[1] if w[1] else "-"
        print("- seq %d, %s: %d of %d within 5%%; worst %.1f%% (%s)" % (q, name, n_ok, n, w[0], where))


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
    elif cmd == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit("unknown command " + cmd)
