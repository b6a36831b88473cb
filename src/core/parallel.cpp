#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "cachegen/runtime.h"

namespace cachegen::detail {
namespace {

// Threads kept between parallel_for calls. Why: starting and joining threads per call cost
// more than decoding a small tensor (40 heads x 4,096 values decoded slower on 2 threads than
// on 1), so small work ran on one thread; a woken pool thread costs a few microseconds, and on
// a VM whose idle CPUs halt far more (a futex wake-up and the halted CPU's restart: ~20 us on
// this project's machine, against 15 us of a batch's histograms).
//
// One job at a time: a call that finds the pool busy (another caller's job, or a parallel_for
// nested inside a job's items) runs its items on its own thread instead of waiting, so nested
// and concurrent calls never deadlock. Helpers that wake after the caller has run out of items
// do not join: the caller never waits for a thread that has not started its job.
//
// Joining and finishing are atomics, not a mutex: a helper that met the caller on a held mutex
// slept in the kernel and was woken by the other's unlock, a system call either side. state_
// holds the job's generation (high bits) and its open slots (low 16 bits): a helper joins by
// taking a slot of the generation it has not served (a compare-and-swap), the caller closes the
// job by clearing the slots, and then knows how many joined and waits for that many to finish.
// Only sleeping and waking go through m_ and the condition variables: each side announces
// itself in an atomic before it checks the other's (all sequentially consistent), so either
// the sleeper sees the change or the waker sees the sleeper, and no wake-up is lost.
class Pool {
 public:
  // Runs work(0) on the caller and on up to `helpers` pool threads; false (nothing run) when the
  // pool is busy.
  bool try_run(size_t helpers, ItemFn work) {
    std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    grow(helpers);
    const size_t wanted = std::min<size_t>({helpers, threads_.size(), kSlotMask});
    const uint64_t generation = (state_.load(std::memory_order_relaxed) >> kSlotBits) + 1;
    work_.store(&work, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    state_.store(generation << kSlotBits | wanted);  // publishes work_ (seq_cst: see sleep)
    if (sleepers_.load() != 0) {
      { std::lock_guard<std::mutex> lock(m_); }  // a sleeper is waiting, or sees the job
      wake_.notify_all();
    }
    work(0);
    // Closed: helpers that did not take a slot by now stay out.
    const uint64_t open = state_.exchange(generation << kSlotBits) & kSlotMask;
    const size_t joined = wanted - static_cast<size_t>(open);
    // Helpers finishing their last items: a short spin usually sees them done without
    // sleeping on done_ (a futex wake-up per job showed as a third of small decodes' time).
    const auto done = [&] { return finished_.load() == joined; };
    if (!spin_until(done, kCallerSpin)) {
      caller_waiting_.store(true);
      std::unique_lock<std::mutex> lock(m_);
      done_.wait(lock, done);
      caller_waiting_.store(false, std::memory_order_relaxed);
    }
    return true;
  }

  static Pool& instance() {
    // Never destroyed: a static destructor elsewhere may still run parallel work at exit, and
    // idle pool threads blocked on the condition variable end with the process.
    static Pool* pool = new Pool;
    return *pool;
  }

 private:
  static constexpr int kSlotBits = 16;
  static constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
  // How long a helper stays awake after a job, and the caller spins before it sleeps on done_.
  // A batch's parallel loops are tens of microseconds apart (its serial parts between them); a
  // helper asleep by the next one joined it ~20 us late, after the caller had paid the wake-up:
  // stories260K's codes encoded slower on 2 threads than on 1.
  static constexpr std::chrono::microseconds kHelperSpin{300}, kCallerSpin{50};

  // Called by the job holder before it publishes its job: a new thread starts from the
  // generation before it, so it joins this very job. (A thread that started after the job was
  // published took the job for one it had seen: every process's first job, a CLI command's
  // whole encode, ran on the caller alone.)
  void grow(size_t helpers) {
    const uint64_t seen = state_.load(std::memory_order_relaxed) >> kSlotBits;
    while (threads_.size() < helpers) {
      try {
        threads_.emplace_back([this, seen] { serve(seen); });
      } catch (const std::system_error&) {
        return;  // no more threads to be had: the ones there share the items
      }
    }
  }

  // Polls done() with pause instructions until it holds (true) or `budget` has passed.
  template <typename Done>
  static bool spin_until(Done done, std::chrono::microseconds budget) {
    const auto until = std::chrono::steady_clock::now() + budget;
    for (;;) {
      for (int i = 0; i < 16; ++i) {
        if (done()) return true;
        pause();
      }
      if (std::chrono::steady_clock::now() >= until) return done();
    }
  }

  void serve(uint64_t seen) {
    // (seq_cst loads, as every access of the sleep handshake: see try_run.)
    const auto fresh = [&] { return state_.load() >> kSlotBits != seen; };
    for (;;) {
      // Spin a while before sleeping: a caller with jobs back to back (a batch's loops, a
      // file's batches, a benchmark's iterations) then finds this thread awake.
      if (!spin_until(fresh, kHelperSpin)) {
        sleepers_.fetch_add(1);
        std::unique_lock<std::mutex> lock(m_);
        wake_.wait(lock, fresh);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      // Take a slot of the job (none left, or closed: it is served by others).
      uint64_t s = state_.load(std::memory_order_acquire);
      seen = s >> kSlotBits;
      bool joined = false;
      while (s >> kSlotBits == seen && (s & kSlotMask) != 0) {
        if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acquire)) {
          joined = true;
          break;
        }
      }
      if (!joined) continue;
      (*work_.load(std::memory_order_relaxed))(0);
      finished_.fetch_add(1);  // (seq_cst: see try_run's wait)
      if (caller_waiting_.load()) {
        { std::lock_guard<std::mutex> lock(m_); }  // the caller is waiting, or sees the count
        done_.notify_all();
      }
    }
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  std::mutex job_mutex_;              // held by the caller for a whole job
  std::vector<std::thread> threads_;  // only the job holder grows it
  std::atomic<uint64_t> state_{0};    // generation << kSlotBits | open slots
  std::atomic<const ItemFn*> work_{nullptr};
  std::atomic<size_t> finished_{0};  // helpers done with the job
  // Sleeping: helpers on wake_, the caller on done_, both under m_.
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::atomic<size_t> sleepers_{0};
  std::atomic<bool> caller_waiting_{false};
};

thread_local bool t_in_item = false;  // this thread runs an item of a pool job

// Runs fn(i) as an item of a pool job: nested parallel_for calls can tell (inside_parallel_for).
void run_item(ItemFn fn, size_t i) {
  const bool outer = t_in_item;
  t_in_item = true;
  try {
    fn(i);
  } catch (...) {
    t_in_item = outer;
    throw;
  }
  t_in_item = outer;
}

// fn(i) for i in [0, n) on up to `workers` threads, the caller's included.
void run_items(size_t n, size_t workers, ItemFn fn) {
  if (workers > n) workers = n;
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);  // not an item of the pool: nested calls may use it
    return;
  }
  if (n > UINT32_MAX) {  // the items left are two 32-bit halves of one word (below)
    for (size_t base = 0; base < n; base += UINT32_MAX) {
      run_items(std::min<size_t>(UINT32_MAX, n - base), workers, [&](size_t i) { fn(base + i); });
    }
    return;
  }
  // The items left, [low, high) as high << 32 | low: the caller takes them from the front,
  // helpers from the back. So where there are as many runs of work as threads, each thread takes
  // the same run every call, and the data a run writes stays in its core's cache (taken in
  // turn, whichever thread came first took the first run: tinystories-hd64's codes encoded on
  // 2 threads in 279-289 us, now 256-261, decoded in 126-129 us, now 116-121).
  std::atomic<uint64_t> left{uint64_t{n} << 32};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const std::thread::id caller = std::this_thread::get_id();
  const auto work = [&](size_t /*unused*/) {
    const bool front = std::this_thread::get_id() == caller;
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) return;
      uint64_t v = left.load(std::memory_order_relaxed);
      size_t i;
      for (;;) {
        const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
        if (lo >= hi) return;
        i = front ? lo : hi - 1;
        const uint64_t next = front ? v + 1 : v - (uint64_t{1} << 32);
        if (left.compare_exchange_weak(v, next, std::memory_order_relaxed)) break;
      }
      try {
        run_item(fn, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        stop.store(true, std::memory_order_relaxed);
      }
    }
  };
  if (!Pool::instance().try_run(workers - 1, work)) work(0);
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace

bool inside_parallel_for() noexcept {
  return t_in_item;
}

void parallel_for(size_t n, ItemFn fn) {
  run_items(n, thread_count(), fn);
}

size_t threads_for_work(size_t n, double item_ns) noexcept {
  if (t_in_item) return 1;  // the pool is busy with the outer loop
  const double shares = static_cast<double>(n) * item_ns / kThreadNs;  // may be huge
  const size_t workers = shares < 1 ? 1 : shares < 4096 ? static_cast<size_t>(shares) : 4096;
  return std::max<size_t>(1, std::min({n, thread_count(), workers}));
}

void parallel_for_work(size_t n, double item_ns, ItemFn fn) {
  run_items(n, threads_for_work(n, item_ns), fn);
}

}  // namespace cachegen::detail
