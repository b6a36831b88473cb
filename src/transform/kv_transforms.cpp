// Reversible K/V transforms: per-head Hadamard rotation and RoPE (undo/redo).
#include <cmath>
#include <string>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/transform.h"
#include "transform/rope_kept.h"

namespace cachegen {
namespace {

void check_shape(const char* what, std::span<float> x, size_t n_rows, size_t n_heads,
                 size_t head_dim) {
  if (head_dim == 0 || n_heads == 0 || x.size() / head_dim / n_heads != n_rows ||
      x.size() != n_rows * n_heads * head_dim) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": x holds " + std::to_string(x.size()) +
                    " values, not n_rows * n_heads * head_dim = " + std::to_string(n_rows) + " * " +
                    std::to_string(n_heads) + " * " + std::to_string(head_dim));
  }
}

}  // namespace

std::string RopeParams::problem(size_t head_dim) const {
  // Ranges, not just finiteness: angles freq_scale * pos * freq_base^(-2i/n_rot) must stay
  // finite in fp32 for every position < 2^31 (1e3 * 2^31 * 1 ~ 2e12), else sin/cos give NaN.
  if (!(freq_base >= kRopeMinFreqBase && freq_base <= kRopeMaxFreqBase))
    return "freq_base " + std::to_string(freq_base) + " is not in [1, 1e12]";
  if (!(freq_scale >= kRopeMinFreqScale && freq_scale <= kRopeMaxFreqScale))
    return "freq_scale " + std::to_string(freq_scale) + " is not in [1e-6, 1e3]";
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > 65536 ||
      (head_dim != 0 && static_cast<size_t>(n_rot) > head_dim)) {
    return "n_rot " + std::to_string(n_rot) + " must be even and <= head_dim" +
           (head_dim != 0 ? " (" + std::to_string(head_dim) + ")" : std::string());
  }
  return {};
}

void RopeParams::validate(size_t head_dim) const {
  const std::string why = problem(head_dim);
  if (!why.empty()) throw Error(ErrorCode::invalid_argument, "rope: " + why);
}

void hadamard_heads(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim) {
  check_shape("hadamard_heads", x, n_rows, n_heads, head_dim);
  if ((head_dim & (head_dim - 1)) != 0) {
    throw Error(ErrorCode::invalid_argument,
                "hadamard_heads: head_dim " + std::to_string(head_dim) + " is not a power of two");
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (size_t h = 0; h < n_rows * n_heads; ++h) {
    float* v = x.data() + h * head_dim;
    for (size_t len = 1; len < head_dim; len <<= 1) {
      for (size_t i = 0; i < head_dim; i += 2 * len) {
        for (size_t j = i; j < i + len; ++j) {
          const float a = v[j], b = v[j + len];
          v[j] = a + b;
          v[j + len] = a - b;
        }
      }
    }
    for (size_t c = 0; c < head_dim; ++c) v[c] *= norm;
  }
}

void random_sign_hadamard_heads(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
                                uint64_t seed, bool inverse) {
  check_shape("random_sign_hadamard_heads", x, n_rows, n_heads, head_dim);
  if ((head_dim & (head_dim - 1)) != 0) {  // checked before x is touched
    throw Error(ErrorCode::invalid_argument, "random_sign_hadamard_heads: head_dim " +
                                                 std::to_string(head_dim) +
                                                 " is not a power of two");
  }
  // splitmix64: a fixed, portable sequence (std distributions differ between libraries).
  std::vector<float> sign(head_dim);
  uint64_t state = seed;
  for (float& s : sign) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    s = ((z ^ (z >> 31)) & 1) != 0 ? -1.0f : 1.0f;
  }
  const auto apply_signs = [&] {
    for (size_t h = 0; h < n_rows * n_heads; ++h) {
      float* v = x.data() + h * head_dim;
      for (size_t c = 0; c < head_dim; ++c) v[c] *= sign[c];
    }
  };
  if (!inverse) apply_signs();
  hadamard_heads(x, n_rows, n_heads, head_dim);
  if (inverse) apply_signs();
}

RopeAngles rope_angles(std::span<const int32_t> positions, size_t head_dim, const RopeParams& rope,
                       bool inverse) {
  rope.validate(head_dim);
  const size_t n_rot = rope.n_rot == 0 ? head_dim : static_cast<size_t>(rope.n_rot);
  RopeAngles a;
  a.n_pairs = n_rot / 2;
  a.cos.resize(positions.size() * a.n_pairs);
  a.sin.resize(positions.size() * a.n_pairs);
  // Angles computed as ggml does (fp32, theta multiplied by theta_scale per pair), so that
  // re-applying RoPE to undone keys reproduces llama.cpp's rotation to fp32 rounding.
  const float theta_scale = std::pow(rope.freq_base, -2.0f / static_cast<float>(n_rot));
  for (size_t r = 0; r < positions.size(); ++r) {
    float theta = static_cast<float>(positions[r]);
    float* c = a.cos.data() + r * a.n_pairs;
    float* s = a.sin.data() + r * a.n_pairs;
    for (size_t i = 0; i < a.n_pairs; ++i) {
      // ggml: theta_interp = freq_scale * theta_extrap (exactly theta when freq_scale is 1).
      const float t = rope.freq_scale == 1.0f ? theta : rope.freq_scale * theta;
      c[i] = std::cos(t);
      s[i] = inverse ? -std::sin(t) : std::sin(t);
      theta *= theta_scale;
    }
  }
  return a;
}

namespace detail {

const RopeAngles& kept_rope_angles(int64_t first, size_t rows, size_t head_dim,
                                   const RopeParams& rope, bool inverse, size_t& first_row) {
  struct Kept {
    int64_t first = 0;  // angles of positions [first, first + rows)
    size_t rows = 0, dim = 0;
    RopeParams rope;
    bool inverse = false;
    RopeAngles angles;
  };
  thread_local Kept kept;
  thread_local RopeAngles too_many;             // a request past the bound, not kept
  constexpr size_t kMaxKept = size_t{1} << 20;  // rows * head_dim: <= 8 MiB of cos and sin
  const auto angles_of = [&](size_t n) {
    std::vector<int32_t> pos(n);
    for (size_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(first + static_cast<int64_t>(t));
    return rope_angles(pos, head_dim, rope, inverse);
  };
  const bool same =
      kept.rows != 0 && kept.dim == head_dim && kept.rope == rope && kept.inverse == inverse;
  const int64_t kept_end = kept.first + static_cast<int64_t>(kept.rows);
  const int64_t end = first + static_cast<int64_t>(rows);
  if (same && first >= kept.first && end <= kept_end) {
    first_row = static_cast<size_t>(first - kept.first);
    return kept.angles;
  }
  if (same && first == kept_end && (kept.rows + rows) * head_dim <= kMaxKept) {
    const RopeAngles more = angles_of(rows);  // the next run: appended
    const size_t had = kept.rows;
    kept.rows = 0;  // not kept until both are extended
    kept.angles.cos.insert(kept.angles.cos.end(), more.cos.begin(), more.cos.end());
    kept.angles.sin.insert(kept.angles.sin.end(), more.sin.begin(), more.sin.end());
    kept.rows = had + rows;
    first_row = had;
    return kept.angles;
  }
  if (rows * head_dim <= kMaxKept) {
    RopeAngles replaced = angles_of(rows);
    kept.rows = 0;  // not kept until every field is
    kept.angles = std::move(replaced);
    kept.first = first;
    kept.dim = head_dim;
    kept.rope = rope;
    kept.inverse = inverse;
    kept.rows = rows;
    first_row = 0;
    return kept.angles;
  }
  too_many = angles_of(rows);
  first_row = 0;
  return too_many;
}

}  // namespace detail

namespace {

// n adjacent pairs (v[2i], v[2i + 1]) rotated by angle i (restrict pointers: the loop vectorises).
void rotate_adjacent(float* __restrict v, const float* __restrict c, const float* __restrict s,
                     size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c[i] - x1 * s[i];
    v[2 * i + 1] = x0 * s[i] + x1 * c[i];
  }
}

}  // namespace

void rope_rows(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
               const RopeAngles& angles, size_t first_row, bool neox) {
  const size_t n_pairs = angles.n_pairs;
  if (n_pairs * 2 > head_dim || (first_row + n_rows) * n_pairs > angles.cos.size()) {
    throw Error(ErrorCode::invalid_argument, "rope_rows: angles do not cover these rows");
  }
  check_shape("rope_rows", x, n_rows, n_heads, head_dim);
  if (!neox && n_heads == 1 && 2 * n_pairs == head_dim) {
    // One head's rows rotated whole (LayerKVCache rotates a head at a time): their pairs and
    // angles lie flat in memory, one run over all of them (row by row, head_dim 8's four pairs
    // did not vectorise: 3-5% of stories260K's level-high encode, now under 1%).
    rotate_adjacent(x.data(), angles.cos.data() + first_row * n_pairs,
                    angles.sin.data() + first_row * n_pairs, n_rows * n_pairs);
    return;
  }
  for (size_t r = 0; r < n_rows; ++r) {
    const float* cos_t = angles.cos.data() + (first_row + r) * n_pairs;
    const float* sin_t = angles.sin.data() + (first_row + r) * n_pairs;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x.data() + (r * n_heads + h) * head_dim;
      if (neox) {
        for (size_t i = 0; i < n_pairs; ++i) {
          const float x0 = v[i], x1 = v[i + n_pairs];
          v[i] = x0 * cos_t[i] - x1 * sin_t[i];
          v[i + n_pairs] = x0 * sin_t[i] + x1 * cos_t[i];
        }
      } else {
        rotate_adjacent(v, cos_t, sin_t, n_pairs);
      }
    }
  }
}

void rope_rows(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
               std::span<const int32_t> positions, const RopeParams& rope, bool inverse) {
  check_shape("rope_rows", x, n_rows, n_heads, head_dim);
  if (positions.size() != n_rows) {
    throw Error(ErrorCode::invalid_argument, "rope_rows: " + std::to_string(positions.size()) +
                                                 " positions for " + std::to_string(n_rows) +
                                                 " rows");
  }
  rope_rows(x, n_rows, n_heads, head_dim, rope_angles(positions, head_dim, rope, inverse), 0,
            rope.neox);
}

}  // namespace cachegen
