// rANS decoding: table construction, the scalar reference kernel and path dispatch.
#include <algorithm>
#include <cstring>
#include <string>

#include "cachegen/runtime.h"
#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "core/checks.h"
#include "core/wire.h"

namespace cachegen::detail {

DecodeTables build_decode_tables(std::span<const ChannelTable> channels, int precision) {
  DecodeTables tables;
  build_decode_tables(channels, precision, tables);
  return tables;
}

void build_decode_tables(std::span<const ChannelTable> channels, int precision,
                         DecodeTables& tables) {
  tables.precision = precision;
  tables.n_syms = channels.empty() ? 0 : static_cast<int>(channels[0].freq.size());
  const size_t n_syms = static_cast<size_t>(tables.n_syms);
  if (tables.uses_search()) {
    tables.cum.resize(channels.size() * (n_syms + 1));
    for (size_t c = 0; c < channels.size(); ++c) {
      const ChannelTable& ch = channels[c];
      const int up = precision - ch.t;
      uint16_t* cum = tables.cum.data() + c * (n_syms + 1);
      for (size_t s = 0; s < n_syms; ++s) cum[s] = static_cast<uint16_t>(ch.cum[s] << up);
      cum[n_syms] = static_cast<uint16_t>(1u << precision);
    }
    tables.entries.clear();
    tables.base.clear();
    tables.shift.clear();
    return;
  }
  // Slot tables (cum is the search's only: its threshold patterns and the scalar search).
  tables.cum.clear();
  size_t total = 0;
  for (const auto& ch : channels) total += size_t{1} << ch.t;
  tables.entries.resize(total + kSlotRun);
  tables.base.resize(channels.size());
  tables.shift.resize(channels.size());
  size_t base = 0;
  for (size_t c = 0; c < channels.size(); ++c) {
    tables.base[c] = static_cast<uint32_t>(base);
    tables.shift[c] = static_cast<uint32_t>(precision - channels[c].t);
    base += size_t{1} << channels[c].t;
  }
  if (simd_path() != SimdPath::scalar) {
    // The same entries, 8 symbols' packed at once and a block by two vector stores (building
    // 64-symbol tables per channel for 256 rows, this loop was a fifth of a 6-bit level's file
    // decode on AVX-512; 11% after).
    fill_slot_entries_avx2(channels, tables.entries.data());
    return;
  }
  // One run of equal entries per symbol, written as a fixed block of kSlotRun entries whatever
  // the frequency (the rest, if any, by a loop): in ascending order of symbols, a block spilling
  // past its symbol's run is overwritten by the symbols after it (an absent symbol's run is
  // empty: its block is overwritten whole), and the padding after the last channel takes the
  // last spill. Variable-length fills per symbol were branch-bound.
  uint32_t* const entries = tables.entries.data();
  for (size_t c = 0; c < channels.size(); ++c) {
    const ChannelTable& ch = channels[c];
    for (size_t s = 0; s < ch.freq.size(); ++s) {
      const uint32_t f = ch.freq[s];
      const uint32_t e = f == 0 ? 0 : pack_entry(static_cast<uint32_t>(s), f, ch.cum[s]);
      uint32_t* run = entries + tables.base[c] + ch.cum[s];
      for (size_t j = 0; j < kSlotRun; ++j) run[j] = e;
      for (size_t j = kSlotRun; j < f; ++j) run[j] = e;
    }
  }
}

void build_shared_decode_tables(const ChannelTable& table, size_t dim, int precision,
                                DecodeTables& tables) {
  build_decode_tables(std::span<const ChannelTable>(&table, 1), precision, tables);
  if (tables.uses_search()) {
    const size_t row = static_cast<size_t>(tables.n_syms) + 1;
    tables.cum.resize(dim * row);
    for (size_t c = 1; c < dim; ++c)
      std::memcpy(tables.cum.data() + c * row, tables.cum.data(), row * sizeof(uint16_t));
    return;
  }
  tables.base.assign(dim, 0);
  tables.shift.assign(dim, tables.shift[0]);
}

void rans_decode_scalar(RansDecodeState& st, const DecodeTables& tables, size_t dim, int n_lanes,
                        size_t begin, size_t end, uint8_t* symbols) {
  const uint32_t p = static_cast<uint32_t>(tables.precision);
  const uint32_t mask = (1u << p) - 1;
  const bool search = tables.uses_search();
  const size_t stride = static_cast<size_t>(tables.n_syms) + 1;
  size_t lane = 0;  // begin is a multiple of n_lanes
  size_t channel = begin % dim;
  for (size_t i = begin; i < end; ++i) {
    uint32_t x = st.x[lane];
    const uint32_t slot = x & mask;
    uint32_t sym, f, start;
    if (search) {
      // The symbol is the number of cumulative starts <= slot (absent symbols share their
      // successor's start, so they are skipped); the SIMD kernels compute the same count.
      const uint16_t* cum = tables.cum.data() + channel * stride;
      sym = 0;
      for (size_t s = 1; s + 1 < stride; ++s) sym += slot >= cum[s] ? 1u : 0u;
      start = cum[sym];
      f = cum[sym + 1] - start;
    } else {
      const uint32_t sh = tables.shift[channel];
      const uint32_t e = tables.entries[tables.base[channel] + (slot >> sh)];
      sym = e & 0xff;
      f = (((e >> 8) & 0xfff) + 1) << sh;
      start = (e >> 20) << sh;
    }
    x = f * (x >> p) + slot - start;
    if (x < kRansLow) {
      if (st.cursor >= st.n_words) {
        fail(ErrorCode::truncated_input, "codec stream: rANS words exhausted at element " +
                                             std::to_string(i) + " of " + std::to_string(end));
      }
      uint16_t w;
      std::memcpy(&w, st.words + st.cursor++, 2);
      x = (x << 16) | w;
    }
    st.x[lane] = x;
    symbols[i] = static_cast<uint8_t>(sym);
    if (++lane == static_cast<size_t>(n_lanes)) lane = 0;
    if (++channel == dim) channel = 0;
  }
}

namespace {

// Validates the payload's framing and loads the lane states.
RansDecodeState start_decode(std::span<const uint8_t> payload, size_t payload_offset, int n_lanes) {
  const size_t state_bytes = static_cast<size_t>(n_lanes) * 4;
  if (payload.size() < state_bytes) {
    fail(ErrorCode::truncated_input,
         "codec stream: rANS states at offset " + std::to_string(payload_offset) + " need " +
             std::to_string(state_bytes) + " bytes, " + std::to_string(payload.size()) + " left");
  }
  if ((payload.size() - state_bytes) % 2 != 0) {
    fail(ErrorCode::corrupt_input, "codec stream: rANS word section at offset " +
                                       std::to_string(payload_offset + state_bytes) +
                                       " has an odd length " +
                                       std::to_string(payload.size() - state_bytes));
  }
  RansDecodeState st;
  for (int l = 0; l < n_lanes; ++l) {
    const auto v = static_cast<uint32_t>(wire::load_le(&payload[static_cast<size_t>(l) * 4], 4));
    if (v < kRansLow) {
      fail(ErrorCode::corrupt_input, "codec stream: rANS state " + std::to_string(l) +
                                         " at offset " + std::to_string(payload_offset + l * 4) +
                                         " is below 2^16");
    }
    st.x[l] = v;
  }
  st.words = reinterpret_cast<const uint16_t*>(payload.data() + state_bytes);
  st.n_words = (payload.size() - state_bytes) / 2;
  st.cursor = 0;
  return st;
}

using SimdKernel = size_t (*)(RansDecodeState&, const DecodeTables&, size_t, size_t, size_t,
                              uint8_t*);

SimdKernel simd_kernel(int n_lanes) {
  if (n_lanes == 4) {
    switch (simd_path()) {
      case SimdPath::avx512:
        return rans_decode_avx512_4;
      case SimdPath::avx2:
        return rans_decode_avx2_4;
      default:
        return nullptr;
    }
  }
  if (n_lanes == static_cast<int>(kNarrowLanes)) {
    switch (simd_path()) {
      case SimdPath::avx512:
        return rans_decode_avx512_8;
      case SimdPath::avx2:
        return rans_decode_avx2_8;
      default:
        return nullptr;
    }
  }
  if (n_lanes != kMaxLanes) return nullptr;
  switch (simd_path()) {
    case SimdPath::avx512:
      return rans_decode_avx512;
    case SimdPath::avx2:
      return rans_decode_avx2;
    default:
      return nullptr;
  }
}

// Decodes [begin, n) of one payload: SIMD while its words allow, the last few steps through a
// zero-padded copy of the remaining words (so SIMD kernels finish the stream instead of the
// scalar kernel), and the scalar kernel for whatever is left; then checks the end state.
void finish_decode(RansDecodeState& st, size_t payload_offset, size_t payload_size,
                   const DecodeTables& tables, size_t dim, int n_lanes, size_t begin,
                   std::span<uint8_t> symbols) {
  const size_t n = symbols.size();
  size_t done = begin;
  if (const SimdKernel kernel = simd_kernel(n_lanes)) {
    done = kernel(st, tables, dim, done, n, symbols.data());
    const size_t left = st.n_words - st.cursor;
    // (The 4-lane search kernel runs on 8 lanes: it wants 8 words left, like the 8-lane ones.)
    if (done < n && left < std::max<size_t>(static_cast<size_t>(n_lanes), kNarrowLanes)) {
      // A valid stream never reads past its last word; if this attempt does, the stream is
      // damaged and the scalar kernel redoes these steps to report it exactly.
      uint16_t padded[2 * kMaxLanes] = {};
      if (left > 0) std::memcpy(padded, st.words + st.cursor, left * 2);
      RansDecodeState tail = st;
      tail.words = padded;
      tail.n_words = left + kMaxLanes;
      tail.cursor = 0;
      const size_t reached = kernel(tail, tables, dim, done, n, symbols.data());
      if (tail.cursor <= left) {
        std::memcpy(st.x, tail.x, sizeof(st.x));
        st.cursor += tail.cursor;
        done = reached;
      }
    }
  }
  rans_decode_scalar(st, tables, dim, n_lanes, done, n, symbols.data());
  if (st.cursor != st.n_words) {
    fail(ErrorCode::corrupt_input, "codec stream: " + std::to_string(st.n_words - st.cursor) +
                                       " unused rANS words before offset " +
                                       std::to_string(payload_offset + payload_size));
  }
  for (int l = 0; l < n_lanes; ++l) {
    if (st.x[l] != kRansLow) {
      fail(ErrorCode::corrupt_input, "codec stream: rANS lane " + std::to_string(l) +
                                         " did not return to its initial state (stream at offset " +
                                         std::to_string(payload_offset) + " is corrupt)");
    }
  }
}

// N payloads whose full steps `kernel` decodes in lockstep, with the results and errors of N
// rans_decode calls in order: each payload is started (a failed start finishes the ones before
// it first, so that their own errors come first), kernel(states, end, symbols) returns the
// element index all of them reached (0: declined), and each is finished in order from there.
template <size_t N, typename Kernel>
void decode_lockstep(const RansPayload* p, const DecodeTables* const* t, size_t dim,
                     Kernel&& kernel) {
  RansDecodeState st[N];
  for (size_t k = 0; k < N; ++k) {
    try {
      st[k] = start_decode(p[k].payload, p[k].payload_offset, p[k].n_lanes);
    } catch (const Error&) {
      for (size_t j = 0; j < k; ++j) {
        finish_decode(st[j], p[j].payload_offset, p[j].payload.size(), *t[j], dim, p[j].n_lanes, 0,
                      p[j].symbols);
      }
      throw;
    }
  }
  size_t end = p[0].symbols.size();
  RansDecodeState* states[N];
  uint8_t* symbols[N];
  for (size_t k = 0; k < N; ++k) {
    end = std::min(end, p[k].symbols.size());
    states[k] = &st[k];
    symbols[k] = p[k].symbols.data();
  }
  const size_t done = kernel(states, end, symbols);
  for (size_t k = 0; k < N; ++k) {
    finish_decode(st[k], p[k].payload_offset, p[k].payload.size(), *t[k], dim, p[k].n_lanes, done,
                  p[k].symbols);
  }
}

}  // namespace

void rans_decode(std::span<const uint8_t> payload, size_t payload_offset,
                 const DecodeTables& tables, size_t dim, int n_lanes, std::span<uint8_t> symbols) {
  RansDecodeState st = start_decode(payload, payload_offset, n_lanes);
  finish_decode(st, payload_offset, payload.size(), tables, dim, n_lanes, 0, symbols);
}

void rans_decode_pair(const RansPayload& a, const DecodeTables& ta, const RansPayload& b,
                      const DecodeTables& tb, size_t dim) {
  const RansPayload p[2] = {a, b};
  const DecodeTables* const t[2] = {&ta, &tb};
  decode_lockstep<2>(p, t, dim, [&](RansDecodeState* const* st, size_t end, uint8_t* const* out) {
    if (a.n_lanes != b.n_lanes) return size_t{0};
    const SimdPath path = simd_path();
    if (a.n_lanes == kMaxLanes && path == SimdPath::avx512)
      return rans_decode_avx512_pair(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    if (a.n_lanes == kMaxLanes && path == SimdPath::avx2)
      return rans_decode_avx2_pair(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    if (a.n_lanes == static_cast<int>(kNarrowLanes) && path == SimdPath::avx512)
      return rans_decode_avx512_pair8(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    if (a.n_lanes == static_cast<int>(kNarrowLanes) && path == SimdPath::avx2)
      return rans_decode_avx2_pair8(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    if (a.n_lanes == 4 && path == SimdPath::avx512)
      return rans_decode_avx512_pair4(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    if (a.n_lanes == 4 && path == SimdPath::avx2)
      return rans_decode_avx2_pair4(*st[0], ta, *st[1], tb, dim, end, out[0], out[1]);
    return size_t{0};
  });
}

void rans_decode_quad(std::span<const RansPayload, 4> p, std::span<const DecodeTables* const, 4> t,
                      size_t dim) {
  // Search alphabets (all one size) on AVX-512, 32- or 8-lane, or 8-lane slot-table ones on AVX2
  // and AVX-512.
  const SimdPath path = simd_path();
  bool narrow = path == SimdPath::avx512 || path == SimdPath::avx2;
  bool wide = path == SimdPath::avx512;
  for (const RansPayload& q : p) {
    narrow = narrow && q.n_lanes == static_cast<int>(kNarrowLanes);
    wide = wide && q.n_lanes == kMaxLanes;
  }
  bool search = path == SimdPath::avx512, slots = true;
  for (const DecodeTables* q : t) {
    search = search && q->uses_search() && q->n_syms >= 2 && q->n_syms == t[0]->n_syms;
    slots = slots && !q->uses_search();
  }
  if (wide && search) {
    decode_lockstep<4>(p.data(), t.data(), dim,
                       [&](RansDecodeState* const* st, size_t end, uint8_t* const* out) {
                         return rans_decode_avx512_quad32(st, t.data(), dim, end, out);
                       });
    return;
  }
  bool quarter = path == SimdPath::avx512 && search;  // 4-lane search payloads, packed in pairs
  for (const RansPayload& q : p) quarter = quarter && q.n_lanes == 4;
  if (quarter) {
    decode_lockstep<4>(p.data(), t.data(), dim,
                       [&](RansDecodeState* const* st, size_t end, uint8_t* const* out) {
                         return rans_decode_avx512_quad4(st, t.data(), dim, end, out);
                       });
    return;
  }
  if (!narrow || !(search || slots)) {
    rans_decode_pair(p[0], *t[0], p[1], *t[1], dim);
    rans_decode_pair(p[2], *t[2], p[3], *t[3], dim);
    return;
  }
  decode_lockstep<4>(p.data(), t.data(), dim,
                     [&](RansDecodeState* const* st, size_t end, uint8_t* const* out) {
                       return search ? rans_decode_avx512_quad8(st, t.data(), dim, end, out)
                                     : rans_decode_avx2_slots_quad8(st, t.data(), dim, end, out);
                     });
}

void rans_decode_group(std::span<const RansPayload> p, std::span<const DecodeTables* const> t,
                       size_t dim) {
  const size_t n = p.size();
  bool packed = simd_path() == SimdPath::avx512 && (n == 6 || n == 8 || n == 10);
  const int lanes = n == 0 ? 0 : p[0].n_lanes;
  packed = packed && (lanes == static_cast<int>(kNarrowLanes) || lanes == 4);
  for (size_t k = 0; packed && k < n; ++k) {
    packed = p[k].n_lanes == lanes && t[k]->uses_search() && t[k]->n_syms >= 2 &&
             t[k]->n_syms == t[0]->n_syms;
  }
  if (packed) {
    const auto kernel = [&](RansDecodeState* const* st, size_t end, uint8_t* const* out) {
      return rans_decode_avx512_group(st, t.data(), n, lanes, dim, end, out);
    };
    if (n == 6) decode_lockstep<6>(p.data(), t.data(), dim, kernel);
    if (n == 8) decode_lockstep<8>(p.data(), t.data(), dim, kernel);
    if (n == 10) decode_lockstep<10>(p.data(), t.data(), dim, kernel);
    return;
  }
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    rans_decode_quad(p.subspan(i).first<4>(), t.subspan(i).first<4>(), dim);
  if (i + 2 <= n) {
    rans_decode_pair(p[i], *t[i], p[i + 1], *t[i + 1], dim);
    i += 2;
  }
  if (i < n) rans_decode(p[i].payload, p[i].payload_offset, *t[i], dim, p[i].n_lanes, p[i].symbols);
}

}  // namespace cachegen::detail
