// Internal: a minimal fork-join parallel loop over independent items.
#pragma once

#include <cstddef>
#include <functional>

namespace cachegen::detail {

// Calls fn(i) for every i in [0, n) on up to cachegen::thread_count() threads (the caller's
// thread included). Items must be independent. The first exception thrown by any fn is
// rethrown in the caller after all threads have stopped; remaining items are skipped.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

// True while this thread runs an item of a parallel_for over several threads: a nested
// parallel_for then runs on this thread alone (the pool is busy with the outer one), so
// splitting work into one share per thread would only make the shares smaller.
bool inside_parallel_for() noexcept;

}  // namespace cachegen::detail
