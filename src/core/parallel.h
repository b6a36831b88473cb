// Internal: a minimal fork-join parallel loop over independent items.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

namespace cachegen::detail {

// A callable fn(i) borrowed for one call: no copy and no allocation (a std::function made of a
// lambda capturing more than two references allocated on every parallel loop: ~90 of a
// stories260K file encode's 416 allocations). The callable must outlive the call, as a lambda
// passed straight to parallel_for does.
class ItemFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ItemFn>>>
  ItemFn(F&& f) noexcept  // NOLINT(google-explicit-constructor): lambdas convert implicitly
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* c, size_t i) { (*static_cast<std::remove_reference_t<F>*>(c))(i); }) {}
  void operator()(size_t i) const { call_(callable_, i); }

 private:
  void* callable_;
  void (*call_)(void*, size_t);
};

// Calls fn(i) for every i in [0, n) on up to cachegen::thread_count() threads (the caller's
// thread included). Items must be independent. The first exception thrown by any fn is
// rethrown in the caller after all threads have stopped; remaining items are skipped.
void parallel_for(size_t n, ItemFn fn);

// parallel_for of items of about `item_ns` nanoseconds of work each (the caller's estimate for
// its kernel): on no more threads than have kThreadNs of it each. Handing small work to another
// core cost more than it saved: the items' data and results move between the cores' caches,
// and handing items out is ~0.15 us each (stories260K's 164 K codes, ~100 us of work in a few
// parallel loops, encoded slower on 2 threads than on 1). 8 us a thread, since the pool's
// helpers spin: at 20 us, 8 heads of 4,096 codes decoded in 29 us on one thread (16 on two), and
// stories260K's counts (16 us) ran on one (its 2-thread encode of codes 70.6 us, 62.5 at 8 us;
// tinystories-hd64's and the file paths' the same at 6, 8, 12 and 20 us).
inline constexpr double kThreadNs = 8000;
void parallel_for_work(size_t n, double item_ns, ItemFn fn);
// The threads parallel_for_work(n, item_ns, fn) runs on (1 inside a parallel_for's item), for
// callers that split their work into one run per thread themselves.
size_t threads_for_work(size_t n, double item_ns) noexcept;

// True while this thread runs an item of a parallel_for over several threads: a nested
// parallel_for then runs on this thread alone (the pool is busy with the outer one), so
// splitting work into one share per thread would only make the shares smaller.
bool inside_parallel_for() noexcept;

}  // namespace cachegen::detail
