#include "core/parallel.h"

#include <algorithm>
#include <atomic>
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
// on 1), so small work ran on one thread; a woken pool thread costs a few microseconds.
//
// One job at a time: a call that finds the pool busy (another caller's job, or a parallel_for
// nested inside a job's items) runs its items on its own thread instead of waiting, so nested
// and concurrent calls never deadlock. Helpers that wake after the caller has run out of items
// do not join: the caller never waits for a thread that has not started its job.
class Pool {
 public:
  // Runs work() on the caller and on up to `helpers` pool threads; false (nothing run) when the
  // pool is busy.
  bool try_run(size_t helpers, const std::function<void()>& work) {
    std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    grow(helpers);
    {
      std::lock_guard<std::mutex> lock(m_);
      work_ = &work;
      wanted_ = std::min(helpers, threads_.size());
      joined_ = 0;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();  // no system call when every helper is still spinning
    work();
    std::unique_lock<std::mutex> lock(m_);
    wanted_ = joined_;  // late wakers stay out
    if (active_ != 0) {
      // Helpers finishing their last items: a short spin usually sees them done without
      // sleeping on done_ (a futex wake-up per job showed as a third of small decodes' time).
      lock.unlock();
      for (int i = 0; i < kSpins && active_count_.load(std::memory_order_acquire) != 0; ++i)
        pause();
      lock.lock();
      done_.wait(lock, [&] { return active_ == 0; });
    }
    work_ = nullptr;
    return true;
  }

  static Pool& instance() {
    // Never destroyed: a static destructor elsewhere may still run parallel work at exit, and
    // idle pool threads blocked on the condition variable end with the process.
    static Pool* pool = new Pool;
    return *pool;
  }

 private:
  // Called by the job holder before it publishes its job: a new thread starts from the
  // generation before it, so it joins this very job. (It read generation_ when it started, and
  // a thread that started after the job was published took the job for one it had seen: every
  // process's first job, a CLI command's whole encode, ran on the caller alone.)
  void grow(size_t helpers) {
    while (threads_.size() < helpers) {
      try {
        threads_.emplace_back([this, seen = generation_] { serve(seen); });
      } catch (const std::system_error&) {
        return;  // no more threads to be had: the ones there share the items
      }
    }
  }

  void serve(uint64_t seen) {
    std::unique_lock<std::mutex> lock(m_);
    const auto wanted = [&] { return generation_ != seen && joined_ < wanted_; };
    for (;;) {
      if (!wanted()) {
        // Spin a while before sleeping: a caller with jobs back to back (a file's batches, a
        // benchmark's iterations) then finds this thread awake.
        lock.unlock();
        for (int i = 0; i < kSpins && published_.load(std::memory_order_acquire) == seen; ++i)
          pause();
        lock.lock();
        wake_.wait(lock, wanted);
      }
      seen = generation_;
      ++joined_;
      ++active_;
      active_count_.store(active_, std::memory_order_release);
      const std::function<void()>* work = work_;
      lock.unlock();
      (*work)();
      lock.lock();
      active_count_.store(--active_, std::memory_order_release);
      if (active_ == 0) done_.notify_all();
    }
  }

  // About 20..50 us of pause instructions, depending on the CPU.
  static constexpr int kSpins = 1000;
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  std::mutex job_mutex_;  // held by the caller for a whole job
  std::mutex m_;          // guards everything below
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;  // only the job holder grows it
  const std::function<void()>* work_ = nullptr;
  size_t wanted_ = 0, joined_ = 0, active_ = 0;
  uint64_t generation_ = 0;
  // generation_ and active_, readable without m_ (for the spins).
  std::atomic<uint64_t> published_{0};
  std::atomic<size_t> active_count_{0};
};

thread_local bool t_in_item = false;  // this thread runs an item of a pool job

// Runs fn(i) as an item of a pool job: nested parallel_for calls can tell (inside_parallel_for).
void run_item(const std::function<void(size_t)>& fn, size_t i) {
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

}  // namespace

bool inside_parallel_for() noexcept {
  return t_in_item;
}

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  size_t workers = thread_count();
  if (workers > n) workers = n;
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);  // not an item of the pool: nested calls may use it
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const std::function<void()> work = [&] {
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) return;
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        run_item(fn, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        stop.store(true, std::memory_order_relaxed);
      }
    }
  };
  if (!Pool::instance().try_run(workers - 1, work)) work();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace cachegen::detail
