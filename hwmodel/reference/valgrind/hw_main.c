/* hwtrace: a minimal valgrind tool that records the same memory events as
   `valgrind --tool=lackey --trace-mem=yes` (instructions; loads, stores and modifies with
   address and size) in a compact binary form, for the reference replay of the arrangement
   estimate (hwmodel/lackey_replay.h, docs/hwmodel.md "Reference").

   Why it is equivalent to lackey: the instrumentation makes the same events in the same
   order. Every guest instruction (IMark), every load (WrTmp of a Load, LoadG), store (Store,
   StoreG), dirty helper's memory effect, CAS (a read then a write) and LL/SC becomes an event
   in a 4-entry list, and a write that follows a read of the same size at the same address
   expression becomes one modify, exactly as lackey's event list does; the list is flushed
   when full, before a side exit, before an LL and at the end of the superblock, as lackey's
   is (the flush points decide which load/store pairs merge). Only the emission differs:
   lackey calls a helper that prints a text line (one write() per event); here a run of
   instruction events becomes one inline counter increment, and each data event calls a
   helper that appends a 16-byte record, carrying the instructions counted before it, to a
   1 MB buffer written to the trace file when full and at exit.

   The program's own writes to stderr (fd 2) are copied into the trace as text records at
   their place among the events (a pre-syscall hook), so the replay sees the kernel's
   `#hwref region=... marker=...` line where lackey's log (the same fd 2) has it.

   Trace format (little-endian 64-bit words), after the 8-byte magic "HWTRACE1":
     header = kind | size << 2 | instructions << 16
       kind 1 load, 2 store, 3 modify: `size` bytes at the address in the next word;
       kind 0 text: `size` bytes of the program's stderr follow, padded to whole words
                    (size 0: only the instructions, written at exit);
     `instructions`: the guest instructions executed since the previous record.

   Usage: valgrind --tool=hwtrace --trace-file=PATH PROGRAM ARGS...
   (VALGRIND_LIB must name the directory the build makes, see CMakeLists.txt). */

#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_machine.h"
#include "pub_tool_options.h"
#include "pub_tool_aspacemgr.h"
#include "pub_tool_vki.h"
#include "pub_tool_vkiscnums.h"

/*------------------------------------------------------------*/
/*--- The trace buffer                                     ---*/
/*------------------------------------------------------------*/

enum { REC_TEXT = 0, REC_LOAD = 1, REC_STORE = 2, REC_MODIFY = 3 };
enum { MAX_TEXT = 16383 };  /* the size field's 14 bits */
#define BUF_WORDS (1u << 17) /* 1 MB */

static const HChar* clo_trace_file = NULL;
static Int trace_fd = -1;
static ULong buf[BUF_WORDS];
static UInt used = 0;
/* Guest instructions since the last record; incremented by inline IR. */
static ULong pending = 0;

static void flush_buffer(void)
{
   const HChar* p = (const HChar*)buf;
   Int left = (Int)(used * sizeof(ULong));
   while (left > 0) {
      Int n = VG_(write)(trace_fd, p, left);
      if (n <= 0) {
         VG_(umsg)("hwtrace: cannot write the trace file '%s'\n", clo_trace_file);
         VG_(exit)(1);
      }
      p += n;
      left -= n;
   }
   used = 0;
}

static VG_REGPARM(2) void record_data(Addr addr, UWord kind_size)
{
   if (used + 2 > BUF_WORDS) flush_buffer();
   buf[used] = (ULong)kind_size | (pending << 16);
   buf[used + 1] = (ULong)addr;
   used += 2;
   pending = 0;
}

static void record_text(const HChar* text, UInt bytes)
{
   while (True) {
      UInt n = bytes < MAX_TEXT ? bytes : MAX_TEXT;
      UInt words = 1 + (n + 7) / 8;
      if (used + words > BUF_WORDS) flush_buffer();
      buf[used + words - 1] = 0;  /* the padding */
      buf[used] = REC_TEXT | ((ULong)n << 2) | (pending << 16);
      VG_(memcpy)(&buf[used + 1], text, n);
      used += words;
      pending = 0;
      text += n;
      bytes -= n;
      if (bytes == 0) return;
   }
}

/* The client's writes to stderr join the trace at their place among the events. */
static void pre_syscall(ThreadId tid, UInt syscallno, UWord* args, UInt nArgs)
{
   if (syscallno != __NR_write || nArgs < 3 || args[0] != 2 || args[2] == 0) return;
   if (!VG_(am_is_valid_for_client)((Addr)args[1], (SizeT)args[2], VKI_PROT_READ)) return;
   record_text((const HChar*)args[1], (UInt)args[2]);
}

static void post_syscall(ThreadId tid, UInt syscallno, UWord* args, UInt nArgs, SysRes res) {}

/*------------------------------------------------------------*/
/*--- Instrumentation: lackey's event list                 ---*/
/*------------------------------------------------------------*/

typedef enum { EV_INSTR, EV_LOAD, EV_STORE, EV_MODIFY } EventKind;

typedef struct {
   EventKind kind;
   IRExpr* addr;   /* data events */
   Int size;       /* data events */
   IRExpr* guard;  /* NULL: unconditional */
} Event;

/* Four entries, as in lackey: the list's capacity decides which load/store pairs merge into
   a modify, so it must not change. */
#define N_EVENTS 4
static Event events[N_EVENTS];
static Int n_events = 0;

static void add_instruction_count(IRSB* sb, ULong n)
{
   IRTemp old = newIRTemp(sb->tyenv, Ity_I64);
   IRTemp sum = newIRTemp(sb->tyenv, Ity_I64);
   IRExpr* where = mkIRExpr_HWord((HWord)&pending);
   addStmtToIRSB(sb, IRStmt_WrTmp(old, IRExpr_Load(Iend_LE, Ity_I64, where)));
   addStmtToIRSB(sb, IRStmt_WrTmp(sum, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(old),
                                                      IRExpr_Const(IRConst_U64(n)))));
   addStmtToIRSB(sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&pending), IRExpr_RdTmp(sum)));
}

static void flush_events(IRSB* sb)
{
   ULong instructions = 0;
   for (Int i = 0; i < n_events; i++) {
      const Event* ev = &events[i];
      UWord kind = 0;
      switch (ev->kind) {
         case EV_INSTR:
            instructions++;
            continue;
         case EV_LOAD: kind = REC_LOAD; break;
         case EV_STORE: kind = REC_STORE; break;
         case EV_MODIFY: kind = REC_MODIFY; break;
      }
      if (instructions > 0) add_instruction_count(sb, instructions);
      instructions = 0;
      IRExpr** argv = mkIRExprVec_2(ev->addr, mkIRExpr_HWord(kind | ((UWord)ev->size << 2)));
      IRDirty* di = unsafeIRDirty_0_N(2, "record_data", VG_(fnptr_to_fnentry)(record_data), argv);
      if (ev->guard) di->guard = ev->guard;
      addStmtToIRSB(sb, IRStmt_Dirty(di));
   }
   if (instructions > 0) add_instruction_count(sb, instructions);
   n_events = 0;
}

static void add_event(IRSB* sb, EventKind kind, IRExpr* addr, Int size, IRExpr* guard)
{
   if (n_events == N_EVENTS) flush_events(sb);
   events[n_events].kind = kind;
   events[n_events].addr = addr;
   events[n_events].size = size;
   events[n_events].guard = guard;
   n_events++;
}

static void add_load(IRSB* sb, IRExpr* addr, Int size, IRExpr* guard)
{
   tl_assert(isIRAtom(addr) && size >= 1 && size < (1 << 14));
   add_event(sb, EV_LOAD, addr, size, guard);
}

/* An unconditional store right after an unconditional load of the same size at the same
   address expression is one modify (lackey's rule, kept for identical traces). */
static void add_store(IRSB* sb, IRExpr* addr, Int size, IRExpr* guard)
{
   tl_assert(isIRAtom(addr) && size >= 1 && size < (1 << 14));
   if (guard == NULL && n_events > 0) {
      Event* last = &events[n_events - 1];
      if (last->kind == EV_LOAD && last->size == size && last->guard == NULL && eqIRAtom(last->addr, addr)) {
         last->kind = EV_MODIFY;
         return;
      }
   }
   add_event(sb, EV_STORE, addr, size, guard);
}

static IRSB* hw_instrument(VgCallbackClosure* closure, IRSB* in, const VexGuestLayout* layout,
                           const VexGuestExtents* vge, const VexArchInfo* archinfo_host,
                           IRType gWordTy, IRType hWordTy)
{
   if (gWordTy != hWordTy) VG_(tool_panic)("hwtrace: host/guest word size mismatch");
   IRTypeEnv* tyenv = in->tyenv;
   IRSB* out = deepCopyIRSBExceptStmts(in);
   Int i = 0;
   for (; i < in->stmts_used && in->stmts[i]->tag != Ist_IMark; i++) addStmtToIRSB(out, in->stmts[i]);
   n_events = 0;
   for (; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      if (!st || st->tag == Ist_NoOp) continue;
      switch (st->tag) {
         case Ist_NoOp:
         case Ist_AbiHint:
         case Ist_Put:
         case Ist_PutI:
         case Ist_MBE:
            break;
         case Ist_IMark:
            add_event(out, EV_INSTR, NULL, 0, NULL);
            break;
         case Ist_WrTmp:
            if (st->Ist.WrTmp.data->tag == Iex_Load)
               add_load(out, st->Ist.WrTmp.data->Iex.Load.addr, sizeofIRType(st->Ist.WrTmp.data->Iex.Load.ty), NULL);
            break;
         case Ist_Store:
            add_store(out, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(tyenv, st->Ist.Store.data)), NULL);
            break;
         case Ist_StoreG: {
            IRStoreG* sg = st->Ist.StoreG.details;
            add_store(out, sg->addr, sizeofIRType(typeOfIRExpr(tyenv, sg->data)), sg->guard);
            break;
         }
         case Ist_LoadG: {
            IRLoadG* lg = st->Ist.LoadG.details;
            IRType loaded = Ity_INVALID, widened = Ity_INVALID;
            typeOfIRLoadGOp(lg->cvt, &widened, &loaded);
            tl_assert(loaded != Ity_INVALID);
            add_load(out, lg->addr, sizeofIRType(loaded), lg->guard);
            break;
         }
         case Ist_Dirty: {
            IRDirty* d = st->Ist.Dirty.details;
            if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) add_load(out, d->mAddr, d->mSize, NULL);
            if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) add_store(out, d->mAddr, d->mSize, NULL);
            break;
         }
         case Ist_CAS: {
            IRCAS* cas = st->Ist.CAS.details;
            Int size = sizeofIRType(typeOfIRExpr(tyenv, cas->dataLo)) * (cas->dataHi != NULL ? 2 : 1);
            add_load(out, cas->addr, size, NULL);
            add_store(out, cas->addr, size, NULL);
            break;
         }
         case Ist_LLSC:
            if (st->Ist.LLSC.storedata == NULL) {
               add_load(out, st->Ist.LLSC.addr, sizeofIRType(typeOfIRTemp(tyenv, st->Ist.LLSC.result)), NULL);
               flush_events(out);
            } else {
               add_store(out, st->Ist.LLSC.addr, sizeofIRType(typeOfIRExpr(tyenv, st->Ist.LLSC.storedata)), NULL);
            }
            break;
         case Ist_Exit:
            flush_events(out);
            break;
         default:
            ppIRStmt(st);
            tl_assert(0);
      }
      addStmtToIRSB(out, st);
   }
   flush_events(out);
   return out;
}

/*------------------------------------------------------------*/
/*--- Options, start and end                               ---*/
/*------------------------------------------------------------*/

static Bool process_option(const HChar* arg)
{
   if VG_STR_CLO(arg, "--trace-file", clo_trace_file) {}
   else return False;
   return True;
}

static void print_usage(void)
{
   VG_(printf)("    --trace-file=PATH         write the binary memory trace to PATH (required)\n");
}

static void print_debug_usage(void) {}

static void post_clo_init(void)
{
   if (clo_trace_file == NULL) {
      VG_(fmsg_bad_option)("--trace-file", "hwtrace needs --trace-file=PATH (the binary trace)\n");
   }
   trace_fd = VG_(fd_open)(clo_trace_file, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0644);
   if (trace_fd < 0) {
      VG_(fmsg_bad_option)("--trace-file", "cannot open '%s' for writing\n", clo_trace_file);
   }
   const HChar magic[8] = {'H', 'W', 'T', 'R', 'A', 'C', 'E', '1'};
   VG_(memcpy)(&buf[0], magic, 8);
   used = 1;
}

static void fini(Int exitcode)
{
   record_text("", 0);  /* the instructions after the last data access */
   flush_buffer();
   VG_(close)(trace_fd);
}

static void pre_clo_init(void)
{
   VG_(details_name)("hwtrace");
   VG_(details_version)(NULL);
   VG_(details_description)("bertlab's binary memory tracer (lackey --trace-mem=yes events)");
   VG_(details_copyright_author)("bertlab; GNU GPL v2 or later, as valgrind");
   VG_(details_bug_reports_to)("the bertlab repository");
   VG_(details_avg_translation_sizeB)(200);
   VG_(basic_tool_funcs)(post_clo_init, hw_instrument, fini);
   VG_(needs_command_line_options)(process_option, print_usage, print_debug_usage);
   VG_(needs_syscall_wrapper)(pre_syscall, post_syscall);
}

VG_DETERMINE_INTERFACE_VERSION(pre_clo_init)
