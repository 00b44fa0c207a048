// hwmodel_qemu_insncount: a QEMU TCG plugin (user mode) that counts the executed guest
// instructions per address, for scripts/hwmodel_aarch64_basis.sh:
//   qemu-aarch64 -plugin ./insncount.so,out=COUNTS ./program ARGS..
// Each translated block gets an inline 64-bit counter, incremented when the block starts (no
// callback per instruction: the guest runs at about the emulator's normal speed); at exit every
// instruction address of every block is credited with its block's count, and the totals are
// written as "ADDRESS COUNT" lines (hex, decimal) to COUNTS. A block left early by a fault
// would be credited whole; the kernels it measures take no faults. Only one guest thread is
// expected (the counters are not atomic). It declares the few functions of QEMU's plugin API
// (API version 1, as in Debian 12's qemu-user 7.2) that it uses, so no QEMU header is needed;
// Debian's qemu-user-static cannot load plugins (a static binary), qemu-user's qemu-aarch64 can.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb*);
typedef void (*atexit_cb)(qemu_plugin_id_t, void*);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, atexit_cb cb, void* userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb* tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn* insn);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb* tb, int op, void* ptr, uint64_t imm);
enum { kInlineAddU64 = 0 };

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

struct Block {
  uint64_t count;
  size_t n;
  struct Block* next;
  uint64_t pc[];
};
static struct Block* blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char* out_path;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  const size_t n = qemu_plugin_tb_n_insns(tb);
  struct Block* b = calloc(1, sizeof(struct Block) + n * sizeof(uint64_t));
  if (!b) abort();
  b->n = n;
  for (size_t i = 0; i < n; ++i) b->pc[i] = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i));
  pthread_mutex_lock(&lock);
  b->next = blocks;
  blocks = b;
  pthread_mutex_unlock(&lock);
  qemu_plugin_register_vcpu_tb_exec_inline(tb, kInlineAddU64, &b->count, 1);
}

// Open addressing, address -> count.
static uint64_t *keys, *vals;
static size_t cap, used;
static void credit(uint64_t pc, uint64_t c) {
  if (2 * (used + 1) > cap) {
    size_t ncap = cap ? 2 * cap : 1 << 16;
    uint64_t *nk = calloc(ncap, 8), *nv = calloc(ncap, 8);
    if (!nk || !nv) abort();
    for (size_t i = 0; i < cap; ++i)
      if (vals[i]) {
        size_t j = (keys[i] >> 2) * 0x9E3779B97F4A7C15ull >> 20 & (ncap - 1);
        while (nv[j]) j = (j + 1) & (ncap - 1);
        nk[j] = keys[i], nv[j] = vals[i];
      }
    free(keys), free(vals);
    keys = nk, vals = nv, cap = ncap;
  }
  size_t j = (pc >> 2) * 0x9E3779B97F4A7C15ull >> 20 & (cap - 1);
  while (vals[j] && keys[j] != pc) j = (j + 1) & (cap - 1);
  if (!vals[j]) keys[j] = pc, ++used;
  vals[j] += c;
}

static void on_exit_(qemu_plugin_id_t id, void* p) {
  (void)id, (void)p;
  for (struct Block* b = blocks; b; b = b->next)
    if (b->count)
      for (size_t i = 0; i < b->n; ++i) credit(b->pc[i], b->count);
  FILE* f = fopen(out_path, "w");
  if (!f) {
    fprintf(stderr, "insncount: cannot write %s\n", out_path);
    return;
  }
  for (size_t i = 0; i < cap; ++i)
    if (vals[i]) fprintf(f, "%" PRIx64 " %" PRIu64 "\n", keys[i], vals[i]);
  fclose(f);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const void* info, int argc,
                                                               char** argv) {
  (void)info;
  for (int i = 0; i < argc; ++i)
    if (strncmp(argv[i], "out=", 4) == 0) out_path = strdup(argv[i] + 4);
  if (!out_path) {
    fprintf(stderr, "insncount: expected the argument out=PATH\n");
    return -1;
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, on_exit_, NULL);
  return 0;
}
