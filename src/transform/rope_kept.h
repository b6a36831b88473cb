// Internal: RoPE angles kept per thread between calls at the same positions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cachegen/transform.h"

namespace cachegen::detail {

// rope_angles of the consecutive positions [first, first + rows) (each below 2^31), kept per
// thread for later calls at positions they cover with the same head_dim, RoPE parameters and
// direction, and extended by the next run of positions, up to 8 MiB of angles (every layer of a
// model rotates its keys at the same positions, and every chunk of every file that starts a
// context at position 0 too: sin and cos were 6% of a pre-RoPE file encode and of its decode).
// `first_row` receives position `first`'s row in the angles returned; they stay valid until this
// thread's next call.
const RopeAngles& kept_rope_angles(int64_t first, size_t rows, size_t head_dim,
                                   const RopeParams& rope, bool inverse, size_t& first_row);

}  // namespace cachegen::detail
