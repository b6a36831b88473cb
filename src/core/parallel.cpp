#include "core/parallel.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "cachegen/runtime.h"

namespace cachegen::detail {

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  size_t workers = thread_count();
  if (workers > n) workers = n;
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) return;
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        stop.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  try {
    for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one share the items.
  }
  work();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace cachegen::detail
