// The llama commands' shared pieces (contracts: llama_cli.h).
#include "llama_cli.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/profile.h"
#include "commands.h"

namespace cachegen::cli {

// --model, else $CACHEGEN_MODEL, else ../shared/models/stories260K.gguf from the working dir.
std::string resolve_model(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("CACHEGEN_MODEL"); env != nullptr && *env != '\0') return env;
  const std::string fallback = "../shared/models/stories260K.gguf";
  if (std::filesystem::exists(fallback)) return fallback;
  throw Error(ErrorCode::not_found,
              "no model: pass --model M.gguf or set CACHEGEN_MODEL (looked at " + fallback + ")");
}

// K+V elements of a snapshot's data stream.
size_t kv_elements(const llama::KvSnapshot& s) {
  size_t n = 0;
  for (const llama::KvLayer& l : s.data_stream().layers) {
    n += s.n_cells() * (llama::k_row_elements(l) + llama::v_row_elements(l));
  }
  return n;
}

bool uses_bits(const LevelArgs& a) {
  return a.bits_opt != nullptr && a.bits_opt->count() > 0;
}

std::string level_name(const LevelArgs& a) {
  if (a.lossless) return "lossless";
  if (uses_bits(a)) return std::to_string(a.bits) + "-bit";
  if (!a.profile.empty()) {
    if (a.bits_per_element > 0) return "profile at " + std::to_string(a.bits_per_element) + " bits";
    if (a.max_kl > 0) return "profile at KL " + std::to_string(a.max_kl);
    return "profile level " + a.level;
  }
  return "level " + a.level;
}

llama::PackOptions pack_options(const LevelArgs& a) {
  llama::PackOptions o;
  o.level = a.level;
  o.lossless = a.lossless;
  if (uses_bits(a)) o.bits = a.bits;
  o.group_size = a.group_size;
  o.chunk_tokens = a.chunk_tokens;
  if (!a.profile.empty()) o.profile = std::make_shared<const KvProfile>(read_profile(a.profile));
  o.bits_per_element = a.bits_per_element;
  o.max_kl = a.max_kl;
  return o;
}

llama::SnapshotEncoding make_encoding(const LevelArgs& a, const llama::Model* model,
                                      size_t n_layers) {
  return llama::pack_encoding(pack_options(a), model, n_layers);
}

void add_level_options(CLI::App* cmd, LevelArgs& a) {
  cmd->add_option("--level", a.level,
                  "quality level: lossless, high (KL below q8_0), medium, low (KL below q4_0); "
                  "docs/QUALITY_LEVELS.md")
      ->capture_default_str();
  a.bits_opt = cmd->add_option("--bits", a.bits,
                               "uniform quantization bits for K and V (1..8) instead of a level");
  cmd->add_flag("--lossless", a.lossless, "store the exact f16 K/V (same as --level lossless)")
      ->excludes(a.bits_opt);
  cmd->add_option("--group-size", a.group_size, "tokens per quantization group (with --bits)")
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", a.chunk_tokens,
                  "tokens per container chunk (a multiple of the group size when quantized; "
                  "default: 256 quantized, 1024 lossless)");
  add_profile_options(cmd, a.profile, a.bits_per_element, a.max_kl);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int32_t argmax_token(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<int32_t> generate(llama::Context& ctx, int32_t first, int32_t pos, int n) {
  std::vector<int32_t> out{first};
  for (int i = 0; i < n; ++i)
    out.push_back(argmax_token(ctx.decode(std::span(&out.back(), 1), pos++, false)));
  return out;
}

}  // namespace cachegen::cli
