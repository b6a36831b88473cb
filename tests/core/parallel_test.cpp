// parallel_for on the thread pool: every item once, errors rethrown, and nested or concurrent
// calls (a pool busy with another job runs the caller's items on its own thread) never
// deadlock. Run under ThreadSanitizer by scripts/test.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cachegen/runtime.h"
#include "core/parallel.h"

namespace cachegen {
namespace {

class ParallelFor : public ::testing::Test {
 protected:
  void SetUp() override { set_thread_count(4); }
  void TearDown() override { set_thread_count(0); }
};

// Runs a job of `threads` items that each wait until every item has started (so all `threads`
// threads must be in it at once); returns the items that gave up waiting. item_ns: the job's
// estimate for parallel_for_work, or 0 for parallel_for.
int items_left_alone(size_t threads, double item_ns = 0) {
  std::atomic<size_t> started{0};
  std::atomic<int> alone{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto run = [&](size_t n, const std::function<void(size_t)>& fn) {
    if (item_ns > 0) {
      detail::parallel_for_work(n, item_ns, fn);
    } else {
      detail::parallel_for(n, fn);
    }
  };
  run(threads, [&](size_t) {
    started.fetch_add(1);
    while (started.load() < threads) {
      if (std::chrono::steady_clock::now() > deadline) {
        alone.fetch_add(1);
        return;
      }
      std::this_thread::yield();
    }
  });
  return alone.load();
}

TEST_F(ParallelFor, EveryItemOnceAcrossManySmallCalls) {
  for (size_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    for (int call = 0; call < 50; ++call) {
      std::vector<std::atomic<int>> seen(n);
      detail::parallel_for(n, [&](size_t i) { seen[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "n " << n << " item " << i;
    }
  }
}

TEST_F(ParallelFor, TheFirstErrorIsRethrownAfterEveryThreadStops) {
  std::atomic<int> running{0};
  EXPECT_THROW(detail::parallel_for(100,
                                    [&](size_t i) {
                                      running.fetch_add(1);
                                      if (i == 10) throw std::runtime_error("item 10");
                                      running.fetch_sub(1);
                                    }),
               std::runtime_error);
  EXPECT_EQ(running.load(), 1);  // only the failed item left its mark: nothing still runs
  // The pool is usable after an error.
  std::atomic<size_t> sum{0};
  detail::parallel_for(100, [&](size_t i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), size_t{4950});
}

TEST_F(ParallelFor, NestedCallsRunEveryItem) {
  std::atomic<size_t> sum{0};
  detail::parallel_for(
      8, [&](size_t i) { detail::parallel_for(8, [&](size_t j) { sum.fetch_add(i * 8 + j); }); });
  EXPECT_EQ(sum.load(), size_t{64 * 63 / 2});
}

TEST_F(ParallelFor, ItemsOfAPoolJobKnowTheyAreInside) {
  EXPECT_FALSE(detail::inside_parallel_for());
  std::atomic<int> inside{0}, nested_inside{0};
  detail::parallel_for(8, [&](size_t) {
    inside.fetch_add(detail::inside_parallel_for() ? 1 : 0);
    detail::parallel_for(
        2, [&](size_t) { nested_inside.fetch_add(detail::inside_parallel_for() ? 1 : 0); });
    inside.fetch_add(detail::inside_parallel_for() ? 1 : 0);  // still, after the nested call
  });
  EXPECT_EQ(inside.load(), 16);
  EXPECT_EQ(nested_inside.load(), 16);
  EXPECT_FALSE(detail::inside_parallel_for());  // reset after the job
  // Also after an item threw.
  EXPECT_THROW(detail::parallel_for(4, [](size_t) { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_FALSE(detail::inside_parallel_for());
  // A loop of one item runs on the caller, not as a pool job: a call inside may still use the
  // pool.
  bool one = true;
  detail::parallel_for(1, [&](size_t) { one = detail::inside_parallel_for(); });
  EXPECT_FALSE(one);
}

TEST_F(ParallelFor, ConcurrentCallersEachGetEveryItem) {
  std::vector<std::thread> callers;
  std::vector<size_t> sums(6, 0);
  for (size_t c = 0; c < sums.size(); ++c) {
    callers.emplace_back([&sums, c] {
      for (int round = 0; round < 40; ++round) {
        std::atomic<size_t> sum{0};
        detail::parallel_for(33, [&](size_t i) { sum.fetch_add(i + c); });
        sums[c] += sum.load();
      }
    });
  }
  for (auto& t : callers) t.join();
  for (size_t c = 0; c < sums.size(); ++c) EXPECT_EQ(sums[c], 40 * (33 * 32 / 2 + 33 * c));
}

TEST_F(ParallelFor, ThreadsStartedForAJobJoinIt) {
  // More threads than any other test asks for, so the pool starts new ones for this job (as it
  // does for a process's first job): each item waits until every item has started, which
  // needs all 12 threads in the job at once. Before the fix the new threads took the job for
  // one they had already seen and the caller ran every item alone.
  constexpr size_t kThreads = 12;
  set_thread_count(kThreads);
  const int alone = items_left_alone(kThreads);
  EXPECT_EQ(alone, 0) << "items waited in vain: threads new to the pool missed the job";
}

TEST_F(ParallelFor, SleepingHelpersWakeForAJob) {
  // Idle helpers spin a while after a job, then sleep: a job after a long pause must wake them.
  EXPECT_EQ(items_left_alone(4), 0);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(items_left_alone(4), 0) << "round " << round;
  }
}

TEST_F(ParallelFor, TheCallerWaitsForLongItemsOnHelpers) {
  // Items far longer than the caller's spin: it sleeps until the helpers are done, and every
  // item has finished when parallel_for returns.
  std::atomic<int> running{0}, done{0};
  detail::parallel_for(8, [&](size_t) {
    running.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    running.fetch_sub(1);
    done.fetch_add(1);
  });
  EXPECT_EQ(running.load(), 0);
  EXPECT_EQ(done.load(), 8);
}

TEST_F(ParallelFor, TheCallerTakesItemsFromTheFrontHelpersFromTheBack) {
  // So that runs of work land on the same thread every call. The first item a thread takes
  // waits until a second one has started: both threads are in the job.
  set_thread_count(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<size_t> started{0};
    std::atomic<int> caller_first{-1}, helper_first{-1};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    detail::parallel_for(6, [&](size_t i) {
      const bool on_caller = std::this_thread::get_id() == caller;
      int none = -1;
      if (!(on_caller ? caller_first : helper_first).compare_exchange_strong(none, int(i))) return;
      started.fetch_add(1);
      while (started.load() < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    });
    ASSERT_EQ(started.load(), 2) << "round " << round << ": the helper never joined";
    EXPECT_EQ(caller_first.load(), 0) << "round " << round;
    EXPECT_EQ(helper_first.load(), 5) << "round " << round;
  }
}

TEST_F(ParallelFor, SmallWorkStaysOnTheCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  ASSERT_EQ(items_left_alone(4), 0);  // the helpers started and awake
  // 64 items said to take 100 ns: 6.4 us in all, below one thread's share. (They take longer,
  // so that helpers would surely join them if they could.)
  std::atomic<int> elsewhere{0};
  std::atomic<size_t> sum{0};
  detail::parallel_for_work(64, 100, [&](size_t i) {
    sum.fetch_add(i);
    if (std::this_thread::get_id() != caller) elsewhere.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  });
  EXPECT_EQ(sum.load(), size_t{64 * 63 / 2});
  EXPECT_EQ(elsewhere.load(), 0);
  EXPECT_EQ(detail::threads_for_work(64, 100), 1u);
  // Enough work for every thread: all 4 can be in the job at once.
  EXPECT_EQ(detail::threads_for_work(4, 2 * detail::kThreadNs), 4u);
  EXPECT_EQ(items_left_alone(4, 2 * detail::kThreadNs), 0);
  // As many threads as have a share, no more than there are items or threads.
  EXPECT_EQ(detail::threads_for_work(64, detail::kThreadNs / 16), 4u);
  EXPECT_EQ(detail::threads_for_work(64, detail::kThreadNs / 32), 2u);
  EXPECT_EQ(detail::threads_for_work(3, 10 * detail::kThreadNs), 3u);
  EXPECT_EQ(detail::threads_for_work(0, detail::kThreadNs), 1u);
  set_thread_count(2);
  EXPECT_EQ(detail::threads_for_work(64, detail::kThreadNs), 2u);
  // Inside a pool job's item, one: the pool is busy with it.
  std::atomic<size_t> inside{0};
  detail::parallel_for(2, [&](size_t) { inside.fetch_add(detail::threads_for_work(8, 1e9)); });
  EXPECT_EQ(inside.load(), 2u);
}

}  // namespace
}  // namespace cachegen
