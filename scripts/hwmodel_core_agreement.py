#!/usr/bin/python3
"""`bertlab estimate` (in_order_core) against the core model of one encoder-layer op
(`bertlab_hwref model`, the model checked against valgrind): per node of encoder layer 0 of
BERT-base inference at SEQ, the estimate's cycles against the sum of the ops it runs, for
every S, core count and arrangement given. Exits 1 when a node differs by more than TOL.

  scripts/hwmodel_core_agreement.py [--seq 512] [--kernels 4,8,16,32] [--cores 1,2,4] [--tol 0.05] [--isa aarch64]

Both sides use the same instruction basis (--isa: the paper system's core.isa is replaced by it,
and bertlab_hwref gets hwmodel/reference/ISA_coefficients.json).
"""
import argparse, json, os, subprocess, sys, tempfile

# Node of the graph -> the layer ops (hwmodel/encoder_layer.h) TiC-SAT runs for it.
NODES = {
    "attention.qkv": ["qkv"],
    "attention.scores.convert": ["k_transpose"],
    "attention.scores": ["scores"],
    "attention.softmax": ["softmax"],
    "attention.context": ["context"],
    "attention.output": ["attn_out", "residual_add"],
    "attention.layernorm": ["layernorm"],
    "ffn.intermediate": ["ffn_in", "gelu"],
    "ffn.output": ["ffn_out", "residual_add"],
    "ffn.layernorm": ["layernorm"],
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--kernels", default="4,8,16,32")
    ap.add_argument("--cores", default="1,2,4")
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--build", default="build")
    ap.add_argument("--isa", default="aarch64", choices=["aarch64", "x86_64"])
    a = ap.parse_args()
    coeffs = f"hwmodel/reference/{a.isa}_coefficients.json"
    worst = 0.0
    tmpdir = tempfile.TemporaryDirectory()
    if True:
        tmp = tmpdir.name
        j = json.load(open("configs/systems/paper-ticsat.json"))
        j["core"]["isa"] = a.isa
        j["qkv"] = "fused"  # the side tool's layer is the reference kernels': one fused qkv GEMM
        system = os.path.join(tmp, "system.json")
        json.dump(j, open(system, "w"))
        out = os.path.join(tmp, "e.json")
        subprocess.run([f"{a.build}/bertlab", "estimate", "--config", "configs/bert-base.json", "--batch", "1",
                        "--seq", str(a.seq), "--heads", "none", "--system", system, "--kernel", a.kernels,
                        "--cores", a.cores, "--nodes", "encoder.0.", "--json", out],
                       check=True, stdout=subprocess.DEVNULL)
        est = json.load(open(out))
    model = {}
    def op_cycles(op, arr, S, P):
        key = (op, arr, S, P)
        if key not in model:
            r = subprocess.run([f"{a.build}/bertlab_hwref", "model", "--op", op, "--seq", str(a.seq), "--arrangement",
                                arr, "--kernel", str(S), "--cores", str(P), "--system", system, "--coefficients",
                                coeffs], check=True, capture_output=True, text=True)
            model[key] = json.loads(r.stdout)["time"]["cycles"]
        return model[key]
    print(f"{'S':>3} {'P':>2} {'arr':<5} {'node':<26} {'estimate':>14} {'core model':>14} {'diff':>7}")
    for e in est:
        S, P, arr = e["kernel"], e["cores"], e["arrangement"]
        for n in e["nodes"]:
            name = n["name"].removeprefix("encoder.0.")
            if name not in NODES:
                continue
            ref = sum(op_cycles(op, arr, S, P) for op in NODES[name])
            d = n["cycles"] / ref - 1
            worst = max(worst, abs(d))
            print(f"{S:>3} {P:>2} {arr:<5} {name:<26} {n['cycles']:>14.0f} {ref:>14.0f} {100 * d:>+6.2f}%")
    print(f"worst |difference|: {100 * worst:.2f}% (tolerance {100 * a.tol:.0f}%)")
    return 0 if worst <= a.tol else 1

if __name__ == "__main__":
    sys.exit(main())
