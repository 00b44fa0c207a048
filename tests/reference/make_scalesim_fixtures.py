#!/usr/bin/python3
"""Run SCALE-Sim v2 (an extracted checkout) on a small matrix of GEMMs with its memory system
(InterfaceBandwidth USER) and write the stall and total cycles bertlab's SCALE-Sim memory model
must reproduce.

usage: make_scalesim_fixtures.py SCALESIM_CHECKOUT [--out tests/reference/scalesim_fixtures.json]
       make_scalesim_fixtures.py SCALESIM_CHECKOUT --case DF R M N K BW IFMAP_KB FILTER_KB OFMAP_KB

SCALE-Sim needs numpy (Debian's python3-numpy); tqdm is replaced by a stand-in (progress bars
only) and pandas is never imported on this path.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import types


def install_tqdm_stand_in():
    # SCALE-Sim only wraps loops in tqdm(...) for progress bars, always with disable=True or
    # verbose off here; a pass-through iterator keeps its behaviour.
    mod = types.ModuleType('tqdm')

    class tqdm:  # noqa: N801 (the name SCALE-Sim imports)
        def __init__(self, iterable=None, total=None, disable=False, **kw):
            self.iterable = iterable

        def __iter__(self):
            return iter(self.iterable)

        def update(self, n=1):
            pass

        def close(self):
            pass

    mod.tqdm = tqdm
    sys.modules['tqdm'] = mod


# [layout] and [sparsity] are read only by SCALE-Sim's dev branch (9b3f10a), which takes the IFMAP and
# FILTER buffers' DRAM bandwidth from the layout section's bank bandwidth: set to Bandwidth too.
CONFIG = """[general]
run_name = fixture

[architecture_presets]
ArrayHeight:    {R}
ArrayWidth:     {R}
IfmapSramSzkB:   {ifmap_kb}
FilterSramSzkB:  {filter_kb}
OfmapSramSzkB:   {ofmap_kb}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : {bw}
Dataflow : {df}
MemoryBanks:   1

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: {bw}
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {bw}
FilterSRAMBankNum: 1
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: USER
"""


def run_case(checkout, df, R, M, N, K, bw, ifmap_kb, filter_kb, ofmap_kb):
    """One SCALE-Sim layer run; returns its compute and access report items."""
    install_tqdm_stand_in()
    sys.path.insert(0, checkout)
    from scalesim.scale_sim import scalesim
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, 'fixture.cfg')
        topo = os.path.join(tmp, 'gemm.csv')
        with open(cfg, 'w') as f:
            f.write(CONFIG.format(R=R, df=df, bw=bw, ifmap_kb=ifmap_kb, filter_kb=filter_kb, ofmap_kb=ofmap_kb))
        with open(topo, 'w') as f:
            f.write('Layer Name, M, N, K,\nfixture, {}, {}, {},\n'.format(M, N, K))
        kwargs = {}
        if 'layout' in inspect.signature(scalesim.__init__).parameters:
            # SCALE-Sim's dev branch (e.g. 9b3f10a) reads a layout file even with custom layouts off; an
            # empty one (header only) leaves the default layout.
            layout = os.path.join(tmp, 'layout.csv')
            with open(layout, 'w') as f:
                f.write('Layer name,\n')
            kwargs['layout'] = layout
        sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, input_type_gemm=True, **kwargs)
        sim.run_scale(top_path=tmp)
        layer = sim.runner.single_layer_sim_object_list[0]
        compute = layer.get_compute_report_items()
        detail = layer.get_detail_report_items()
    # compute: total cycles, stall cycles, ...; detail: SRAM (start, stop, count) x 3 then DRAM x 3
    return {'total_cycles': int(compute[0]), 'stall_cycles': int(compute[1]),
            'dram_ifmap_reads': int(detail[11]), 'dram_filter_reads': int(detail[14]),
            'dram_ofmap_writes': int(detail[17])}


# The fixture matrix: GEMM shapes (some not multiples of the array), the three dataflows, two
# arrays, and bandwidths and SRAM sizes small enough that the buffers refill many times.
ARRAYS_AND_SHAPES = [
    (8, [(64, 48, 40), (37, 29, 51), (20, 70, 9)]),
    (32, [(96, 64, 80), (70, 45, 100)]),
]
MEMORIES = [  # (bandwidth words/cycle, ifmap kB, filter kB, ofmap kB)
    (10, 1, 1, 1),
    (4, 2, 1, 1),
    (2, 64, 64, 64),
]


def scalesim_commit(checkout):
    try:
        return subprocess.run(['git', '-C', checkout, 'rev-parse', 'HEAD'], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def counts_stalls_twice(checkout):
    # Before 22f88b17 read_buffer.service_reads added the lateness of a prefetch once
    # unconditionally and then once more when positive: an addition right before the test.
    with open(os.path.join(checkout, 'scalesim', 'memory', 'read_buffer.py')) as f:
        code = [line.split('#')[0].strip() for line in f]
    return any(a == 'offset += potential_stall_cycles' and b == 'if potential_stall_cycles > 0:'
               for a, b in zip(code, code[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('checkout')
    ap.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'scalesim_fixtures.json'))
    ap.add_argument('--commit', help='the SCALE-Sim commit of the checkout (when it is not a git work tree)')
    ap.add_argument('--case', nargs=9, metavar=('DF', 'R', 'M', 'N', 'K', 'BW', 'IFMAP_KB', 'FILTER_KB', 'OFMAP_KB'))
    args = ap.parse_args()
    if args.case:
        df, *nums = args.case
        print(json.dumps(run_case(os.path.abspath(args.checkout), df, *[int(x) for x in nums])))
        return
    cases = []
    for R, shapes in ARRAYS_AND_SHAPES:
        for (M, N, K) in shapes:
            for df in ('ws', 'os', 'is'):
                for bw, ikb, fkb, okb in MEMORIES:
                    # Each run in its own interpreter: SCALE-Sim keeps state in default arguments.
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), args.checkout, '--case', df,
                                          str(R), str(M), str(N), str(K), str(bw), str(ikb), str(fkb), str(okb)],
                                         capture_output=True, text=True, check=True).stdout
                    res = json.loads(out.strip().splitlines()[-1])
                    case = {'dataflow': df, 'array': R, 'M': M, 'N': N, 'K': K, 'bandwidth': bw,
                            'ifmap_kb': ikb, 'filter_kb': fkb, 'ofmap_kb': okb}
                    case.update(res)
                    cases.append(case)
                    print(json.dumps(case), file=sys.stderr)
    # Written whole to a temporary file, then renamed: an interrupted run leaves the old fixture.
    tmp = args.out + '.tmp'
    with open(tmp, 'w') as f:
        f.write('{\n')
        f.write('  "generator": "tests/reference/make_scalesim_fixtures.py",\n')
        f.write('  "scalesim_commit": {},\n'.format(json.dumps(args.commit or scalesim_commit(args.checkout))))
        f.write('  "stall_double_count": {},\n'.format(json.dumps(counts_stalls_twice(args.checkout))))
        f.write('  "interface_bandwidth": "USER", "word_bytes": 1,\n')
        f.write('  "cases": [\n')
        f.write(',\n'.join('    ' + json.dumps(c, separators=(',', ':')) for c in cases))
        f.write('\n  ]\n}\n')
    os.replace(tmp, args.out)


if __name__ == '__main__':
    main()
