// llama.cpp's state files (llama_context::state_save_file / state_seq_save_file):
// u32 magic, u32 version, u32 n_tokens, n_tokens x i32 token ids, then the state bytes.
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "llama/state_internal.h"

namespace cachegen::llama {
namespace {

// Frozen by llama.h (LLAMA_SESSION_* and LLAMA_STATE_SEQ_* of the pinned release).
constexpr uint32_t kSessionMagic = 0x6767736eu;  // 'ggsn'
constexpr uint32_t kSessionVersion = 10;
constexpr uint32_t kSeqMagic = 0x67677371u;  // 'ggsq'
constexpr uint32_t kSeqVersion = 3;

}  // namespace

KvSnapshot parse_state_file(std::span<const uint8_t> bytes, const ParseOptions& options) {
  wire::Reader in(bytes, "llama state");
  const uint32_t magic = in.u32("magic");
  const uint32_t version = in.u32("version");
  StateKind kind;
  uint32_t expected_version;
  if (magic == kSeqMagic) {
    kind = StateKind::sequence;
    expected_version = kSeqVersion;
  } else if (magic == kSessionMagic) {
    kind = StateKind::context;
    expected_version = kSessionVersion;
  } else {
    in.corrupt("magic", "not a llama.cpp state file ('ggsq' or 'ggsn')");
  }
  if (version != expected_version) {
    throw Error(ErrorCode::unsupported_version,
                "llama state file: version " + std::to_string(version) + ", this build reads " +
                    std::to_string(expected_version) + " (llama.cpp de3ff81)");
  }
  const uint32_t n_tokens = in.u32("n_tokens");
  if (n_tokens > options.max_tokens) {
    in.corrupt("n_tokens", std::to_string(n_tokens) + " exceeds the limit " +
                               std::to_string(options.max_tokens));
  }
  const std::span<const uint8_t> token_bytes = in.take(uint64_t{n_tokens} * 4, "tokens");
  const std::span<const uint8_t> state = bytes.subspan(in.offset());
  KvSnapshot s = detail::parse_state(state, options, kind, false);
  s.tokens.resize(n_tokens);
  for (uint32_t i = 0; i < n_tokens; ++i) {
    s.tokens[i] = static_cast<int32_t>(wire::load_le(&token_bytes[size_t{i} * 4], 4));
  }
  return s;
}

std::vector<uint8_t> build_state_file(const KvSnapshot& snapshot) {
  std::vector<uint8_t> bytes;
  wire::Writer out(bytes);
  const bool seq = snapshot.kind == StateKind::sequence;
  out.u32(seq ? kSeqMagic : kSessionMagic);
  out.u32(seq ? kSeqVersion : kSessionVersion);
  out.u32(static_cast<uint32_t>(snapshot.tokens.size()));
  for (int32_t t : snapshot.tokens) out.i32(t);
  detail::build_state_into(snapshot, false, out);
  return bytes;
}

}  // namespace cachegen::llama
