"""Unit tests of the independent cache simulator (cache_sim.py) on hand-computed cases.

    /usr/bin/python3 -m pytest tests/reference/test_cache_sim.py
"""
import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cache_sim  # noqa: E402
from cache_sim import END, MODIFY, RESTART, WRITE, Geometry, LruCache  # noqa: E402

LINE = 64


def run(tmp_path, l1, llc, records, cores=1, operands=("a", "other"), filtered=False):
    """Counts of `records` (addr, bytes, core, flags, operand) by the fast path, checked equal to
    the direct path."""
    path = str(tmp_path / "dump.bin")
    cache_sim.write_dump(path, cores, operands, records)
    # small chunks: the state carries over from chunk to chunk
    fast = cache_sim.simulate(path, l1, llc, chunk_records=7, filtered=filtered).json()
    assert cache_sim.simulate_direct(path, l1, llc, filtered).json() == fast
    return fast


def rd(line, core=0, op=0, size=4):
    return (line * LINE, size, core, 0, op)


def wr(line, core=0, op=0, size=4):
    return (line * LINE, size, core, WRITE, op)


BIG_L1 = Geometry(1 << 20, 16, LINE)  # holds everything below: only the LLC misses


def test_hashed_index_by_hand():
    g = Geometry(1 << 20, 8, LINE, hashed=True)  # the paper's LLC: 2048 sets, 11-bit fields
    assert (g.sets, g.bits) == (2048, 11)
    assert g.set_of(0) == 0
    assert g.set_of(5) == 5
    assert g.set_of(2048) == 1  # fields 0 and 1: 0 ^ 1
    assert g.set_of(2048 + 3) == 2  # 3 ^ 1
    assert g.set_of((1 << 22) | (1 << 11) | 7) == 7  # 7 ^ 1 ^ 1
    assert g.set_of(0x12345) == 865  # 0x12345 & 2047 = 837, 0x12345 >> 11 = 36, 837 ^ 36 = 865
    assert g.set_of(1 << 34) == 2  # kRegionBase's first line: bit 34 = bit 1 of the fourth field
    small = Geometry(4 * 2 * LINE, 2, LINE, hashed=True)  # 4 sets, 2-bit fields
    assert small.set_of(0b110110) == 0  # 10 ^ 01 ^ 11
    assert small.set_of(0b1011) == 1  # 11 ^ 10
    lines = np.array([0, 5, 2048, 2051, (1 << 22) | (1 << 11) | 7, 0x12345, 1 << 34], dtype=np.uint64)
    assert g.sets_of(lines).tolist() == [0, 5, 1, 2, 7, 865, 2]
    # A bijection on every aligned block of `sets` lines.
    block = np.arange(7 * 2048, 8 * 2048, dtype=np.uint64)
    assert sorted(g.sets_of(block).tolist()) == list(range(2048))


def test_modulo_index():
    g = Geometry(1 << 20, 8, LINE)
    assert g.set_of(4097) == 1 and g.set_of(2047) == 2047
    assert Geometry(1 << 20, 8, LINE, hashed=False).sets_of(np.array([4097], dtype=np.uint64)).tolist() == [1]
    odd = Geometry(3 * 2 * LINE, 2, LINE)  # 3 sets: modulo, not a mask
    assert [odd.set_of(x) for x in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        Geometry(3 * 2 * LINE, 2, LINE, hashed=True)


def test_two_way_set_thrash():
    c = LruCache(Geometry(2 * 2 * LINE, 2, LINE))  # 2 sets x 2 ways: lines 0, 2, 4 share set 0
    assert [c.access(x, False)[0] for x in [0, 2, 4, 0, 2, 4]] == [False] * 6  # LRU: always the one needed next
    c = LruCache(Geometry(2 * 2 * LINE, 2, LINE))
    # 0 miss, 2 miss, 0 hit, 4 miss (evicts 2, the LRU), 0 hit, 2 miss (evicts 4), line 1 (set 1) miss
    assert [c.access(x, False)[0] for x in [0, 2, 0, 4, 0, 2, 1]] == [False, False, True, False, True, False, False]


def test_two_way_thrash_through_a_dump(tmp_path):
    llc = Geometry(2 * 2 * LINE, 2, LINE)
    r = run(tmp_path, BIG_L1, llc, [rd(x) for x in [0, 2, 4, 0, 2, 4]])
    assert r["llc_misses"] == [6] and r["read_lines"] == 6 and r["write_lines"] == 0
    assert r["l1_misses"] == [3]  # the large L1 keeps the three lines
    r = run(tmp_path, BIG_L1, llc, [rd(x) for x in [0, 2, 0, 4, 0, 2]])
    assert r["llc_misses"] == [4]


def test_dirty_eviction_and_flush(tmp_path):
    llc = Geometry(2 * 2 * LINE, 2, LINE)
    # write 0, read 2, read 4: 0 is the LRU line and dirty -> one write; nothing dirty at the end
    r = run(tmp_path, BIG_L1, llc, [wr(0), rd(2), rd(4)])
    assert (r["read_lines"], r["write_lines"]) == (3, 1)
    # write after read of the same line makes it dirty: the same write-back
    r = run(tmp_path, BIG_L1, llc, [rd(0), wr(0), rd(2), rd(4)])
    assert (r["read_lines"], r["write_lines"]) == (3, 1)
    # a modify (load and store) writes
    r = run(tmp_path, BIG_L1, llc, [(0, 4, 0, WRITE | MODIFY, 0), rd(2), rd(4)])
    assert r["write_lines"] == 1
    # reads only: clean evictions write nothing
    r = run(tmp_path, BIG_L1, llc, [rd(0), rd(2), rd(4)])
    assert r["write_lines"] == 0
    # the end flushes every dirty line, charged to the operand that wrote it last
    r = run(tmp_path, BIG_L1, llc, [wr(0, op=0), wr(1, op=0), rd(3, op=1), wr(1, op=1)])
    assert (r["read_lines"], r["write_lines"]) == (3, 2)
    assert r["operand_lines"] == {"a": [2, 1], "other": [1, 1]}
    # an evicted dirty line is charged to its last writer; the miss to the access that missed
    r = run(tmp_path, BIG_L1, llc, [rd(0, op=1), wr(0, op=0), rd(2, op=1), rd(4, op=1)])
    assert r["operand_lines"] == {"a": [0, 1], "other": [3, 0]}


def test_llc_sees_l1_hits(tmp_path):
    # L1: 2 sets x 1 way (lines 0 and 1 apart, 0 and 2 together); LLC: 1 set x 2 ways.
    l1, llc = Geometry(2 * LINE, 1, LINE), Geometry(2 * LINE, 2, LINE)
    # 0, 1 miss both; 0 hits in the L1, and makes 0 the LLC's most recent line, so 2 evicts 1
    # from the LLC (not 0); 2 evicts 0 from the L1, so the last 0 misses there but hits the LLC.
    r = run(tmp_path, l1, llc, [rd(0), rd(1), rd(0), rd(2), rd(0)])
    assert r["l1_misses"] == [4] and r["llc_misses"] == [3]
    # An L1 eviction writes nothing back: the LLC line was made dirty by the write itself.
    r = run(tmp_path, l1, llc, [wr(0), rd(2), rd(4)])
    assert r["write_lines"] == 1 and r["l1_misses"] == [3]


def test_filtered_hierarchy(tmp_path):
    # The other policy: the LLC sees L1 misses (fills) and L1 write-backs only.
    l1, llc = Geometry(2 * LINE, 1, LINE), Geometry(2 * LINE, 2, LINE)
    # As in test_llc_sees_l1_hits, but the L1 hit on 0 leaves the LLC's order alone: 2 evicts 0
    # from the LLC too, and the last 0 misses there.
    r = run(tmp_path, l1, llc, [rd(0), rd(1), rd(0), rd(2), rd(0)], filtered=True)
    assert r["l1_misses"] == [4] and r["llc_misses"] == [4]
    # write 0 (L1 and LLC: a clean fill; the L1 line dirty), 2 evicts it from the L1 (set 0):
    # written back into the LLC (a hit: dirty there now), 4 evicts it from the L1's set 0 and,
    # as the LRU line, from the LLC: one DRAM write
    r = run(tmp_path, l1, llc, [wr(0), rd(2), rd(4)], filtered=True)
    assert (r["read_lines"], r["write_lines"]) == (3, 1)
    # a dirty line still in an L1 at the end goes through the LLC to DRAM
    r = run(tmp_path, l1, llc, [wr(0)], filtered=True)
    assert (r["read_lines"], r["write_lines"]) == (1, 1)
    # a write-back that misses the LLC takes a line without reading DRAM: core 1's lines 2 and 4
    # evict 0 from the LLC while core 0 holds it dirty; core 0's 2 writes it back (no read)
    r = run(tmp_path, l1, llc, [wr(0, core=0), rd(2, core=1), rd(4, core=1), rd(2, core=0)], cores=2,
            filtered=True)
    assert r["llc_misses"] == [2, 2] and r["write_lines"] == 1  # 0 written back, then flushed dirty at the end
    with pytest.raises(ValueError):
        cache_sim.FastSim(Geometry(4 * 32, 1, 32), llc, 1, None, filtered=True)  # two line sizes


def test_shared_llc_private_l1s(tmp_path):
    l1, llc = Geometry(2 * LINE, 1, LINE), Geometry(4 * LINE, 2, LINE)
    # core 0 brings line 0 in; core 1 misses in its own L1 but hits the shared LLC
    r = run(tmp_path, l1, llc, [rd(0, core=0), rd(0, core=1), rd(0, core=1)], cores=2)
    assert r["l1_misses"] == [1, 1] and r["llc_misses"] == [1, 0]
    # core 1's accesses evict core 0's line from the shared LLC's set (lines 0, 2, 4: set 0)
    r = run(tmp_path, l1, llc, [rd(0, core=0), rd(2, core=1), rd(4, core=1), rd(0, core=0)], cores=2)
    assert r["llc_misses"] == [2, 2] and r["l1_misses"] == [1, 2]


def test_lines_of_an_access(tmp_path):
    llc = Geometry(64 * LINE, 4, LINE)
    r = run(tmp_path, BIG_L1, llc, [(60, 8, 0, 0, 0), (128, 64, 0, 0, 0), (250, 0, 0, 0, 0)])
    assert r["llc_misses"] == [3] and r["line_accesses"] == 3  # 60..67: lines 0 and 1; 128..191: line 2
    assert r["accesses"] == 2  # an access of 0 bytes touches nothing


def test_restart_keeps_the_caches(tmp_path):
    llc = Geometry(2 * 2 * LINE, 2, LINE)
    RS = (0, 0, 0, RESTART, 0)
    r = run(tmp_path, BIG_L1, llc, [wr(0), rd(2), RS, rd(0), rd(2)])
    assert r["llc_misses"] == [0] and r["l1_misses"] == [0] and r["write_lines"] == 1  # 0 dirty at the end
    r = run(tmp_path, BIG_L1, llc, [wr(0), rd(2), RS, rd(4)])  # evicts the warm-up's dirty line 0
    assert (r["read_lines"], r["write_lines"]) == (1, 1)


def test_fast_equals_direct_on_random_streams(tmp_path):
    rnd = random.Random(39)
    for trial in range(12):
        cores = rnd.choice([1, 2, 4])
        hashed = trial % 2 == 0
        l1 = Geometry(rnd.choice([2, 4, 8]) * rnd.choice([1, 2]) * LINE, rnd.choice([1, 2]), LINE)
        ways = rnd.choice([1, 2, 4, 8])
        llc = Geometry(rnd.choice([1, 4, 16]) * ways * LINE, ways, LINE, hashed=hashed)
        pool = [rnd.randrange(0, 1 << rnd.choice([8, 12, 40])) for _ in range(rnd.choice([8, 40, 200]))]
        recs = []
        for i in range(3000):
            if i == 1000:
                recs.append((0, 0, 0, RESTART, 0))
            line = rnd.choice(pool) if rnd.random() < 0.8 else (recs[-1][0] // LINE if recs and recs[-1][1] else 0)
            w = rnd.random() < 0.3
            off = rnd.choice([0, 0, 0, 60])
            recs.append((line * LINE + off, rnd.choice([1, 4, 8]), rnd.randrange(cores),
                         (WRITE if w else 0) | (MODIFY if w and rnd.random() < 0.5 else 0), rnd.randrange(2)))
        run(tmp_path, l1, llc, recs, cores=cores)  # asserts fast == direct
        run(tmp_path, l1, llc, recs, cores=cores, filtered=True)


def test_malformed_dumps(tmp_path):
    path = str(tmp_path / "bad.bin")
    cache_sim.write_dump(path, 1, ["a"], [rd(0)])
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-16])  # no end record
    with pytest.raises(ValueError, match="no end record"):
        cache_sim.simulate(path, BIG_L1, BIG_L1)
    open(path, "wb").write(data[:-3])
    with pytest.raises(ValueError, match="inside a record"):
        cache_sim.simulate(path, BIG_L1, BIG_L1)
    open(path, "wb").write(b"HWTRACE1" + data[8:])
    with pytest.raises(ValueError, match="not an access dump"):
        cache_sim.simulate(path, BIG_L1, BIG_L1)


def test_paper_system_file():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    l1, llc = cache_sim.load_system(os.path.join(root, "configs/systems/paper-ticsat.json"))
    assert (l1.sets, l1.ways, l1.hashed) == (256, 2, False)
    assert (llc.sets, llc.ways, llc.hashed) == (2048, 8, True)
    _, llc = cache_sim.load_system(os.path.join(root, "configs/systems/paper-ticsat.json"), modulo=True)
    assert not llc.hashed
    assert END == 8


def hwref_binary():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("BERTLAB_HWREF", os.path.join(root, "build", "bertlab_hwref"))
    return root, path if os.access(path, os.X_OK) else None


def test_replay_dump_against_the_replay(tmp_path):
    """End to end without valgrind: a random two-core lackey trace (markers, warm-up, accesses
    over two lines, loads, stores, modifies, region and stack addresses) replayed by
    `bertlab_hwref replay --dump-accesses` on small caches; cache_sim.py on the dump gives the
    replay's own counts (hashed and modulo LLC)."""
    import json
    import subprocess
    root, tool = hwref_binary()
    if tool is None:
        pytest.skip("bertlab_hwref is not built (or set BERTLAB_HWREF)")
    with open(os.path.join(root, "configs/systems/paper-ticsat.json")) as f:
        system = json.load(f)
    system["l1"].update(size_bytes=4 * 2 * LINE, ways=2)  # 4 sets of 2 ways per core
    system["llc"].update(size_bytes=16 * 4 * LINE, ways=4, hashed_index=True)  # 16 sets of 4 ways
    sys_path = tmp_path / "system.json"
    sys_path.write_text(json.dumps(system))
    rnd = random.Random(7)
    region, marker, warm, stack = 0x100000, 0x9000, 0xa000, 0x7ff000000
    traces = []
    for core in range(2):
        lines = ["#hwref region=%#x bytes=%d marker=%#x warm=%#x" % (region, 1 << 24, marker, warm),
                 " L %x,4" % (stack + 64 * 3), " S %x,8" % warm]
        lines += [" L %x,8" % (stack + 64 * rnd.randrange(8)) for _ in range(20)]  # warm-up
        lines.append(" S %x,8" % marker)
        for _ in range(3000):
            lines += ["I  %07x,4" % (0x400000 + 4 * rnd.randrange(100))] * rnd.randrange(1, 4)
            base = region if rnd.random() < 0.8 else stack
            addr = base + rnd.randrange(200 * LINE) + rnd.choice([0, 0, 0, 60])
            lines.append(" %s %x,%d" % (rnd.choice("LLSM"), addr, rnd.choice([1, 4, 8])))
        lines.append(" S %x,8" % marker)
        path = tmp_path / ("core%d.txt" % core)
        path.write_text("\n".join(lines) + "\n")
        traces.append(str(path))
    for modulo in (False, True):
        dump = str(tmp_path / "dump.bin")
        out = subprocess.run([tool, "replay", "--format", "lackey", "--op", "residual_add", "--seq", "32",
                              "--system", str(sys_path), "--dump-accesses", dump] + (["--modulo"] if modulo else [])
                             + traces, check=True, capture_output=True, text=True).stdout
        replay = json.loads(out)
        l1, llc = cache_sim.load_system(str(sys_path), modulo)
        assert llc.hashed == (not modulo)
        for counts in (cache_sim.simulate(dump, l1, llc).json(), cache_sim.simulate_direct(dump, l1, llc).json()):
            assert counts["l1_misses"] == replay["l1_misses"]
            assert counts["llc_misses"] == replay["llc_misses"]
            assert (counts["read_lines"], counts["write_lines"]) == (replay["read_lines"], replay["write_lines"])
            assert counts["operand_lines"] == {k: v for k, v in replay["operand_lines"].items()}
        assert sum(replay["llc_misses"]) > 100 and replay["write_lines"] > 100  # the small caches evict
        header, chunks = cache_sim.read_dump(dump)
        rec = np.concatenate(list(chunks))
        assert header["cores"] == 2 and header["operands"][-1] == "other"
        assert np.count_nonzero(rec["flags"] & RESTART) == 1 and rec["flags"][-1] == END
        acc = rec[(rec["flags"] & (RESTART | END)) == 0]
        # region addresses at kRegionBase (1 << 40), the others private per core ((core + 1) << 44)
        in_region = acc["addr"] < (np.uint64(1) << np.uint64(44))
        assert ((acc["addr"][in_region] >> np.uint64(40)) == 1).all()
        assert ((acc["addr"][~in_region] >> np.uint64(44)) == acc["core"][~in_region].astype(np.uint64) + 1).all()
        assert ((acc["flags"] & MODIFY) == 0).sum() < len(acc) and ((acc["flags"] & MODIFY) != 0).any()
