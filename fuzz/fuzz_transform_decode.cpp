// Any bytes as a transform file's tensor data (docs/FORMAT.md, codec 2: form 1 or 2, plane
// groups, class streams), decoded against a small fixed profile at 1..64 rows, with and without
// sink rows: values or a cachegen::Error, never a crash, hang or unbounded allocation. The
// first two bytes pick the row count and the sink rows; the rest is the data.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/profile.h"
#include "profile/transform_codec.h"

namespace {

constexpr size_t kWidth = 16, kBlock = 8;

const cachegen::KvProfile& fuzz_profile() {
  static const cachegen::KvProfile p = [] {
    cachegen::ProfileFitter fit(1, 2, 8, kBlock, {1});
    std::vector<float> rows(64 * kWidth);
    uint32_t s = 1;
    for (float& v : rows) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    }
    fit.add(0, 0, rows);
    fit.add(0, 1, rows);
    cachegen::KvProfile out = fit.finish();
    for (size_t c = 0; c < kWidth; ++c) out.tensors[0].step_factor[c] = c % 2 ? 0.5f : 2.0f;
    return out;
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const cachegen::KvProfile& p = fuzz_profile();
  const size_t rows = 1 + data[0] % 64;
  cachegen::detail::TransformSteps steps;
  steps.step = 0.25f;
  steps.sink_rows = data[1] % 8;
  steps.sink_scale = 0.5f;
  steps.factor = p.tensors[0].step_factor;
  std::vector<cachegen::Half> out(rows * kWidth);
  try {
    cachegen::detail::unpack_transform(std::span<const uint8_t>(data + 2, size - 2), p.tensors[0],
                                       kWidth, kBlock, steps, out, "fuzz");
  } catch (const cachegen::Error&) {
  }
  return 0;
}
