#pragma once
// Happens-before edges for ThreadSanitizer across TBB's parallel loops (issue 14). Debian's
// libtbb is not built with TSan, so the hand-off of work to TBB's threads and the join at the
// end of a loop happen where TSan cannot see them: every result a worker writes and the caller
// reads after the loop looks like a race. A TsanJoin around a loop tells TSan about both edges;
// in other builds it is empty and costs nothing.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BERTLAB_TSAN_ACTIVE 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(BERTLAB_TSAN_ACTIVE)
#define BERTLAB_TSAN_ACTIVE 1
#endif

#ifdef BERTLAB_TSAN_ACTIVE
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace bertlab {

// TsanJoin join;              (caller, before the loop: its writes become visible to workers)
// tbb::parallel_for(..., [&] { join.enter(); ...; join.leave(); });
// join.joined();              (caller, after the loop: the workers' writes become visible)
class TsanJoin {
 public:
#ifdef BERTLAB_TSAN_ACTIVE
  TsanJoin() { __tsan_release(&fork_); }
  void enter() { __tsan_acquire(&fork_); }
  void leave() { __tsan_release(&join_); }
  void joined() { __tsan_acquire(&join_); }

 private:
  char fork_ = 0, join_ = 0;
#else
  void enter() {}
  void leave() {}
  void joined() {}
#endif
};

}  // namespace bertlab
