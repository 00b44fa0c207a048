#!/usr/bin/env python3
"""An independent cache simulator for the reference replays (docs/hwmodel-cache-check.md).

Written from the specification, not from hwmodel/tracesim.cpp: the system file's caches
(configs/systems/*.json: size_bytes, ways, line_bytes, hashed_index) and the modelling choices
that hwmodel/tracesim.h states for the exact simulator it checks:

- one private L1 per core and one LLC shared by all cores, each set-associative with true LRU
  replacement, write-allocate (a write miss fills the line) and write-back (a dirty line goes
  to DRAM when it is evicted, and at the end);
- the LLC sees every access, L1 hits included (they update the LLC's recency and make its line
  dirty); so the two levels are independent caches: no inclusion, no back-invalidation, and an
  L1 eviction writes nothing (the LLC already holds the line's dirty state);
- an access of `bytes` bytes at `addr` touches every line from addr to addr + bytes - 1, each
  as one access; a modify (load and store) is one access that writes;
- counts: per core L1 misses and LLC misses (each LLC miss is one line read from DRAM,
  charged to the operand of the access that missed); DRAM line writes: dirty LLC lines
  evicted, plus every line still dirty at the end (charged to the operand that last wrote
  the line); the counts restart at the dump's restart record (the caches stay warm).

Set index (hwmodel/system.h, CacheDesc::set_of): sets = size / line / ways; modulo: line
number mod sets; hashed (a power-of-two number of sets, more than one): the XOR of all the
set-index-wide bit fields of the line number (line ^ line >> b ^ line >> 2b ..., b = log2 sets),
masked to b bits.

Input: the access dump of `bertlab_hwref replay --dump-accesses FILE` (format:
hwmodel/lackey_replay.h): the accesses exactly as the replay hands them to its simulator, after
the lock-step interleaving of the cores and the address mapping. Output: one JSON line of counts.

Two implementations of the same simulation: `simulate_direct` takes one access at a time in
the dump's order (obviously right, slow), `simulate` (the default) is fast and exact by two
facts of the model above. (1) The sets of a cache are independent and the two levels do not
interact, so each cache's accesses can be regrouped set by set, keeping their order inside a
set (a stable sort by set, per L1 core and set). (2) Inside one set's sequence, an access to the
line accessed just before it in that set hits and leaves the LRU order as it is (the line is
already the most recent); all it can change is the dirty bit. So a run of accesses to one line
is simulated as its first access, writing if any of them writes (a write after a read of a
resident line only sets the dirty bit, which the merged access sets as well). tests/reference/
test_cache_sim.py checks that both give the same counts on random streams.

`--hierarchy filtered` simulates the other common policy, to measure what TraceSim's choice is
worth (not to check it): the LLC sees only the L1s' misses (a read of the line) and their
write-backs (a dirty line evicted from an L1 is written into the LLC, taking a line there
without a DRAM read if the LLC does not hold it; at the end the L1s' dirty lines go into the
LLC, core by core, then the LLC's to DRAM); a write-back goes to the LLC before the fill that
evicted it. Still non-inclusive (an LLC eviction leaves the L1s alone), one line size for both
levels. The fast path runs the L1s set by set, then their misses and write-backs, put back in
the order of the accesses that caused them, through the LLC one at a time.
"""
import argparse
import json
import sys

import numpy as np

MAGIC = b"BLACCES1"
RECORD = np.dtype([("addr", "<u8"), ("bytes", "<u4"), ("core", "u1"), ("flags", "u1"), ("operand", "<u2")])
WRITE, MODIFY, RESTART, END = 1, 2, 4, 8


class Geometry:
    """One cache's shape and set index."""

    def __init__(self, size_bytes, ways, line_bytes=64, hashed=False):
        self.size, self.ways, self.line = int(size_bytes), int(ways), int(line_bytes)
        if self.line <= 0 or self.ways <= 0 or self.size < self.line * self.ways:
            raise ValueError(f"cache geometry: size {size_bytes}, ways {ways}, line {line_bytes}")
        self.sets = self.size // self.line // self.ways
        self.hashed = bool(hashed) and self.sets > 1
        self.bits = self.sets.bit_length() - 1
        if self.hashed and (1 << self.bits) != self.sets:
            raise ValueError(f"hashed set index: the number of sets must be a power of two, got {self.sets}")

    @classmethod
    def from_json(cls, d, hashed=None):
        return cls(d["size_bytes"], d.get("ways", 1), d.get("line_bytes", 64),
                   d.get("hashed_index", False) if hashed is None else hashed)

    def set_of(self, line):
        """The set of line number `line` (byte address // line bytes)."""
        if not self.hashed:
            return line % self.sets
        h = 0
        while line:
            h ^= line
            line >>= self.bits
        return h & (self.sets - 1)

    def sets_of(self, lines):
        """set_of over a numpy array of line numbers (uint64)."""
        if not self.hashed:
            return lines % np.uint64(self.sets)
        h = np.zeros_like(lines)
        x = lines.copy()
        b = np.uint64(self.bits)
        while x.any():
            h ^= x
            x >>= b
        return h & np.uint64(self.sets - 1)


class LruCache:
    """A set-associative LRU cache, one access at a time. Each set is a dict from line to its
    dirty state (None: clean; else the operand that last wrote it), oldest first."""

    def __init__(self, g):
        self.g = g
        self.sets = [dict() for _ in range(g.sets)]

    def access(self, line, write, operand=0):
        """Returns (hit, victim line, its dirty state): (hit, None, None) without an eviction."""
        s = self.sets[self.g.set_of(line)]
        if line in s:
            state = s.pop(line)
            s[line] = operand if write else state
            return True, None, None
        victim = state = None
        if len(s) >= self.g.ways:
            victim = next(iter(s))
            state = s.pop(victim)
        s[line] = operand if write else None
        return False, victim, state

    def dirty(self):
        """(line, dirty state) of every dirty line, set by set, oldest first."""
        return [(ln, v) for s in self.sets for ln, v in s.items() if v is not None]


class Counts:
    def __init__(self, cores, operands):
        self.cores, self.operands = cores, list(operands)
        self.reset()

    def reset(self):
        self.l1_misses = [0] * self.cores
        self.llc_misses = [0] * self.cores
        self.reads = [0] * len(self.operands)
        self.writes = [0] * len(self.operands)
        self.accesses = 0  # accesses (dump records) since the restart
        self.line_accesses = 0  # their lines

    def json(self):
        return {
            "l1_misses": self.l1_misses,
            "llc_misses": self.llc_misses,
            "read_lines": sum(self.reads),
            "write_lines": sum(self.writes),
            "operand_lines": {n: [self.reads[i], self.writes[i]] for i, n in enumerate(self.operands)},
            "accesses": self.accesses,
            "line_accesses": self.line_accesses,
        }


def load_system(path, modulo=False):
    """The L1 and LLC geometries of a system file; `modulo`: the LLC with a modulo index (as
    `bertlab_hwref replay --modulo`)."""
    with open(path) as f:
        s = json.load(f)
    return Geometry.from_json(s["l1"]), Geometry.from_json(s["llc"], hashed=False if modulo else None)


def read_dump(path, chunk_records=1 << 23):
    """(header, generator of record arrays); the header is the dump's JSON. Fails on a dump
    without the magic or without its end record (a replay cut short)."""
    f = open(path, "rb")
    magic = f.read(8)
    if magic != MAGIC:
        raise ValueError(f"{path}: not an access dump (no {MAGIC!r} header)")
    n = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(n).decode())
    if header.get("record_bytes") != RECORD.itemsize:
        raise ValueError(f"{path}: records of {header.get('record_bytes')} bytes, expected {RECORD.itemsize}")

    def chunks():
        ended = False
        with f:
            while True:
                buf = f.read(chunk_records * RECORD.itemsize)
                if not buf:
                    break
                if len(buf) % RECORD.itemsize:
                    raise ValueError(f"{path}: the dump ends inside a record")
                r = np.frombuffer(buf, dtype=RECORD)
                if ended and len(r):
                    raise ValueError(f"{path}: records after the end record")
                ended = ended or bool((r["flags"] & END).any())
                yield r
        if not ended:
            raise ValueError(f"{path}: no end record (the replay that wrote it did not finish)")

    return header, chunks()


def segments(records):
    """Splits a chunk at restart and end records: yields (accesses, then_restart)."""
    marks = np.flatnonzero(records["flags"] & (RESTART | END))
    start = 0
    for m in marks:
        yield records[start:m], bool(records["flags"][m] & RESTART)
        start = m + 1
    yield records[start:], False


def lines_of(acc, line_bytes):
    """Every line of every access: (index of the access, line number), in order."""
    acc_bytes = acc["bytes"].astype(np.uint64)
    keep = acc_bytes > 0
    addr = acc["addr"]
    lb = np.uint64(line_bytes)
    first = addr // lb
    last = (addr + np.maximum(acc_bytes, np.uint64(1)) - np.uint64(1)) // lb
    n = np.where(keep, last - first + np.uint64(1), np.uint64(0)).astype(np.int64)
    if (n == 1).all():
        return np.arange(len(acc)), first
    idx = np.repeat(np.arange(len(acc)), n)
    starts = np.cumsum(n) - n
    lines = first[idx] + (np.arange(len(idx)) - starts[idx]).astype(np.uint64)
    return idx, lines


def runs(keys, lines):
    """Sort stably by key (the set) and find the runs of one line: (order, start of each run)."""
    order = np.argsort(keys, kind="stable")
    k, ln = keys[order], lines[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ln[1:] != ln[:-1]) | (k[1:] != k[:-1])
    return order, np.flatnonzero(new)


def key_dtype(n):
    # 16-bit keys sort by radix sort (numpy's stable sort of small integers): linear time.
    return np.uint16 if n <= 1 << 16 else np.int64


def run_summary(acc, idx, order, starts):
    """Per run (of runs()): the operand of its first access and the operand of its last write
    (-1: no write)."""
    write = (acc["flags"][idx][order] & WRITE).astype(bool)
    operand = acc["operand"][idx][order].astype(np.int64)
    pos = np.where(write, np.arange(len(order)), -1)
    last_write = np.maximum.reduceat(pos, starts)
    return operand[starts], np.where(last_write >= 0, operand[np.maximum(last_write, 0)], -1)


class FastSim:
    """The simulation of the module docstring, one chunk of accesses at a time. `filtered`: the
    other hierarchy (module docstring), the LLC seeing only L1 misses and write-backs."""

    def __init__(self, l1, llc, cores, counts, filtered=False):
        self.l1g, self.llcg, self.cores, self.c, self.filtered = l1, llc, cores, counts, filtered
        if filtered:
            check_filtered(l1, llc)
        self.l1 = [dict() for _ in range(cores * l1.sets)]  # core * sets + set -> {line: dirty state}
        self.llc = [dict() for _ in range(llc.sets)]  # set -> {line: dirty state}

    def run(self, acc):
        if len(acc) == 0:
            return
        c = self.c
        c.accesses += int(np.count_nonzero(acc["bytes"]))
        core = acc["core"].astype(np.int64)
        if core.max() >= self.cores:
            raise ValueError(f"access of core {core.max()} in a dump of {self.cores} cores")
        idx, lines = lines_of(acc, self.l1g.line)
        if len(lines) == 0:
            return
        keys = (core[idx] * self.l1g.sets + self.l1g.sets_of(lines).astype(np.int64))
        order, starts = runs(keys.astype(key_dtype(self.cores * self.l1g.sets)), lines)
        first = order[starts]
        if self.filtered:
            self.l1_filtered(acc, core, idx, lines, keys, order, starts)
            return
        # L1s: reads and writes alike (an L1 miss is counted either way; nothing is written back).
        sets, ways, miss = self.l1, self.l1g.ways, c.l1_misses
        per_set = self.l1g.sets
        for k, ln in zip(keys[first].tolist(), lines[first].tolist()):
            s = sets[k]
            if ln in s:
                del s[ln]
            else:
                miss[k // per_set] += 1
                if len(s) >= ways:
                    del s[next(iter(s))]
            s[ln] = None
        # LLC: every access, in each set's order.
        idx, lines = lines_of(acc, self.llcg.line)
        c.line_accesses += len(lines)
        sets_of = self.llcg.sets_of(lines)
        order, starts = runs(sets_of.astype(key_dtype(self.llcg.sets)), lines)
        first_op, writer = run_summary(acc, idx, order, starts)
        first = order[starts]
        sets, ways = self.llc, self.llcg.ways
        llc_miss, reads, writes = c.llc_misses, c.reads, c.writes
        for st, ln, cr, op, w in zip(sets_of[first].tolist(), lines[first].tolist(), core[idx[first]].tolist(),
                                     first_op.tolist(), writer.tolist()):
            s = sets[st]
            if ln in s:
                state = s.pop(ln)
                s[ln] = state if w < 0 else w
                continue
            llc_miss[cr] += 1
            reads[op] += 1
            if len(s) >= ways:
                victim = s.pop(next(iter(s)))
                if victim is not None:
                    writes[victim] += 1
            s[ln] = None if w < 0 else w

    def l1_filtered(self, acc, core, idx, lines, keys, order, starts):
        """The L1s set by set (their dirty lines too); then their misses and write-backs, put back
        in the order of the accesses that caused them, into the LLC."""
        c = self.c
        first_op, writer = run_summary(acc, idx, order, starts)
        first = order[starts]  # a run's first line access: its place in the chunk's order
        sets, ways, miss = self.l1, self.l1g.ways, c.l1_misses
        per_set = self.l1g.sets
        ev_pos, ev_kind, ev_line, ev_core, ev_op = [], [], [], [], []  # kind 0: write-back, 1: fill
        for k, ln, p, op, w in zip(keys[first].tolist(), lines[first].tolist(), first.tolist(), first_op.tolist(),
                                   writer.tolist()):
            s = sets[k]
            if ln in s:
                state = s.pop(ln)
                s[ln] = state if w < 0 else w
                continue
            cr = k // per_set
            miss[cr] += 1
            if len(s) >= ways:
                victim = next(iter(s))
                state = s.pop(victim)
                if state is not None:
                    ev_pos.append(p), ev_kind.append(0), ev_line.append(victim), ev_core.append(cr)
                    ev_op.append(state)
            ev_pos.append(p), ev_kind.append(1), ev_line.append(ln), ev_core.append(cr), ev_op.append(op)
            s[ln] = None if w < 0 else w
        if not ev_pos:
            return
        o = np.lexsort((np.array(ev_kind), np.array(ev_pos)))  # by place, a write-back before its fill
        line_ = np.array(ev_line, dtype=np.uint64)[o]
        set_ = self.llcg.sets_of(line_).tolist()
        kind, core_, op_ = (np.array(a)[o].tolist() for a in (ev_kind, ev_core, ev_op))
        c.line_accesses += sum(kind)
        sets, ways = self.llc, self.llcg.ways
        llc_miss, reads, writes = c.llc_misses, c.reads, c.writes
        for st, kd, ln, cr, op in zip(set_, kind, line_.tolist(), core_, op_):
            s = sets[st]
            if ln in s:
                state = s.pop(ln)
                s[ln] = state if kd else op  # a fill keeps the state, a write-back makes it dirty
                continue
            if kd:
                llc_miss[cr] += 1
                reads[op] += 1
            if len(s) >= ways:
                victim = s.pop(next(iter(s)))
                if victim is not None:
                    writes[victim] += 1
            s[ln] = None if kd else op  # a write-back takes a line without a DRAM read

    def llc_write_back(self, ln, op):
        s = self.llc[self.llcg.set_of(ln)]
        if ln in s:
            del s[ln]
        elif len(s) >= self.llcg.ways:
            victim = s.pop(next(iter(s)))
            if victim is not None:
                self.c.writes[victim] += 1
        s[ln] = op

    def finish(self):
        if self.filtered:  # the L1s' dirty lines into the LLC, core by core, set by set
            for s in self.l1:
                for ln, v in s.items():
                    if v is not None:
                        self.llc_write_back(ln, v)
        for s in self.llc:
            for v in s.values():
                if v is not None:
                    self.c.writes[v] += 1


def simulate(path, l1, llc, chunk_records=1 << 23, filtered=False):
    """Counts of an access dump (module docstring), fast."""
    header, chunks = read_dump(path, chunk_records)
    counts = Counts(header["cores"], header["operands"])
    sim = FastSim(l1, llc, header["cores"], counts, filtered)
    for records in chunks:
        for acc, restart in segments(records):
            sim.run(acc)
            if restart:
                counts.reset()
    sim.finish()
    return counts


def simulate_direct(path, l1, llc, filtered=False):
    """The same counts, one access at a time in the dump's order (for tests and small dumps)."""
    header, chunks = read_dump(path)
    cores = header["cores"]
    counts = Counts(cores, header["operands"])
    l1s = [LruCache(l1) for _ in range(cores)]
    shared = LruCache(llc)
    if filtered:
        check_filtered(l1, llc)

    def llc_read(core, ln, operand):  # a fill (TraceSim's hierarchy: any access)
        hit, _, victim = shared.access(ln, False, operand)
        if victim is not None:
            counts.writes[victim] += 1
        if not hit:
            counts.llc_misses[core] += 1
            counts.reads[operand] += 1

    def llc_write_back(ln, operand):  # filtered: a whole dirty line from an L1, no DRAM read
        _, _, victim = shared.access(ln, True, operand)
        if victim is not None:
            counts.writes[victim] += 1

    for records in chunks:
        for r in records.tolist():
            addr, size, core, flags, operand = r
            if flags & RESTART:
                counts.reset()
                continue
            if flags & END or size == 0:
                continue
            counts.accesses += 1
            write = bool(flags & WRITE)
            for ln in range(addr // l1.line, (addr + size - 1) // l1.line + 1):
                hit, victim, state = l1s[core].access(ln, write, operand)
                if not hit:
                    counts.l1_misses[core] += 1
                if filtered:
                    if state is not None:
                        llc_write_back(victim, state)
                    if not hit:
                        counts.line_accesses += 1
                        llc_read(core, ln, operand)
            if filtered:
                continue
            for ln in range(addr // llc.line, (addr + size - 1) // llc.line + 1):
                counts.line_accesses += 1
                hit, _, victim = shared.access(ln, write, operand)
                if victim is not None:
                    counts.writes[victim] += 1
                if not hit:
                    counts.llc_misses[core] += 1
                    counts.reads[operand] += 1
    if filtered:
        for c in l1s:
            for ln, v in c.dirty():
                llc_write_back(ln, v)
    for _, v in shared.dirty():
        counts.writes[v] += 1
    return counts


def check_filtered(l1, llc):
    if l1.line != llc.line:
        raise ValueError("the filtered hierarchy needs one line size for the L1 and the LLC")


def write_dump(path, cores, operands, records):
    """Writes an access dump (for tests): records are (addr, bytes, core, flags, operand)."""
    head = json.dumps({"cores": cores, "record_bytes": RECORD.itemsize, "operands": list(operands)}).encode()
    head += b" " * (-len(head) % 16)
    arr = np.array([tuple(r) for r in records] + [(0, 0, 0, END, 0)], dtype=RECORD)
    with open(path, "wb") as f:
        f.write(MAGIC + len(head).to_bytes(8, "little") + head + arr.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="access dump of `bertlab_hwref replay --dump-accesses`")
    ap.add_argument("--system", required=True, help="system file (its l1 and llc)")
    ap.add_argument("--modulo", action="store_true", help="modulo-indexed LLC (as the replay's --modulo)")
    ap.add_argument("--direct", action="store_true", help="one access at a time (slow; the same counts)")
    ap.add_argument("--hierarchy", choices=["tracesim", "filtered"], default="tracesim",
                    help="tracesim: the LLC sees every access (the policy checked); filtered: only L1 misses "
                         "and L1 write-backs (what that policy is worth)")
    a = ap.parse_args()
    l1, llc = load_system(a.system, a.modulo)
    filtered = a.hierarchy == "filtered"
    counts = (simulate_direct(a.dump, l1, llc, filtered) if a.direct else simulate(a.dump, l1, llc, filtered=filtered))
    print(json.dumps(counts.json()))


if __name__ == "__main__":
    sys.exit(main())
