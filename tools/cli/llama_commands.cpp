// `cachegen eval`: the rate–quality table on a real model.
// `cachegen llama inspect STATE`: what a llama.cpp state file holds.
// `cachegen llama pack STATE -o STATE.cgkv` / `unpack STATE.cgkv -o STATE`: state files in the
// .cgkv container (llama::snapshot_to_cgkv / cgkv_to_snapshot).
// `cachegen llama demo`: capture a real KV cache, write it as a .cgkv, read it back, restore it
// into a fresh context, continue generating.
#include "llama_commands.h"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/npy.h"
#include "cachegen/transform.h"

namespace cachegen::cli {
namespace {

// --model, else $CACHEGEN_MODEL, else ../shared/models/stories260K.gguf from the working dir.
std::string resolve_model(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("CACHEGEN_MODEL"); env != nullptr && *env != '\0') return env;
  const std::string fallback = "../shared/models/stories260K.gguf";
  if (std::filesystem::exists(fallback)) return fallback;
  throw Error(ErrorCode::not_found,
              "no model: pass --model M.gguf or set CACHEGEN_MODEL (looked at " + fallback + ")");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::not_found, "cannot open '" + path + "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void print_table(const std::vector<llama::EvalRow>& rows) {
  std::printf("%-30s %7s %6s %6s %8s %10s %7s %8s %9s %9s %9s\n", "method", "bits/el", "K", "V",
              "x fp16", "KL", "top1", "ppl", "ppl_exact", "enc ms", "dec ms");
  for (const llama::EvalRow& r : rows) {
    std::printf("%-30s %7.3f %6.2f %6.2f %8.2f %10.3g %6.1f%% %8.4f %9.4f %9.1f %9.1f\n",
                r.method.c_str(), r.bits_per_element, r.k_bits, r.v_bits, r.ratio_vs_fp16, r.kl,
                100 * r.top1, r.ppl, r.ppl_exact, r.encode_ms, r.decode_ms);
  }
}

void add_eval(CLI::App& app) {
  auto* o = new llama::EvalOptions;  // lives as long as the app (process)
  auto* json = new bool(false);
  CLI::App* cmd = app.add_subcommand(
      "eval", "KV-cache compression quality on a real model: bits, KL, top-1, perplexity");
  cmd->add_option("--model", o->model_path, "GGUF model (default: $CACHEGEN_MODEL)");
  cmd->add_option("--text", o->text_path, "UTF-8 text to take the windows from")->required();
  cmd->add_option("--contexts", o->n_contexts, "windows of the text")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "tokens whose KV is compressed")->capture_default_str();
  cmd->add_option("--continue", o->n_continue, "tokens scored after the prefix")
      ->capture_default_str();
  cmd->add_option("--group-size", o->group_size, "tokens per quantization group")
      ->capture_default_str();
  cmd->add_flag("--flash-attn", o->flash_attn, "flash attention on (V row-major)");
  cmd->add_option("--threads", o->n_threads, "llama.cpp threads")->capture_default_str();
  cmd->add_flag("--json", *json, "JSON rows instead of a table");
  cmd->callback([o, json] {
    o->model_path = resolve_model(o->model_path);
    const auto progress = [json](const std::string& line) {
      if (!*json) std::fprintf(stderr, "eval: %s\n", line.c_str());
    };
    const std::vector<llama::EvalRow> rows = llama::evaluate_kv_quality(*o, progress);
    if (!*json) {
      std::printf("model %s, %d windows: prefix %d tokens, %d scored, group %zu, flash-attn %s\n",
                  o->model_path.c_str(), o->n_contexts, o->prefix, o->n_continue, o->group_size,
                  o->flash_attn ? "on" : "off");
      print_table(rows);
      return;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const llama::EvalRow& r : rows) {
      out.push_back({{"method", r.method},
                     {"emulated", r.emulated},
                     {"bits_per_element", r.bits_per_element},
                     {"k_bits", r.k_bits},
                     {"v_bits", r.v_bits},
                     {"estimate_bits", r.estimate_bits},
                     {"ratio_vs_fp16", r.ratio_vs_fp16},
                     {"kl", r.kl},
                     {"top1", r.top1},
                     {"ppl", r.ppl},
                     {"ppl_exact", r.ppl_exact},
                     {"encode_ms", r.encode_ms},
                     {"decode_ms", r.decode_ms},
                     {"contexts", o->n_contexts},
                     {"prefix", o->prefix},
                     {"continue", o->n_continue}});
    }
    std::printf("%s\n", out.dump(1).c_str());
  });
}

void add_inspect(CLI::App& llama_cmd) {
  auto* path = new std::string;
  CLI::App* cmd = llama_cmd.add_subcommand("inspect", "describe a llama.cpp state file");
  cmd->add_option("STATE", *path, "file from llama_state_seq_save_file / llama_state_save_file")
      ->required();
  cmd->callback([path] {
    const std::vector<uint8_t> bytes = read_file(*path);
    const llama::KvSnapshot s = llama::parse_state_file(bytes);
    std::printf("%s state file, %zu bytes, %zu tokens, %zu streams%s%s\n",
                s.kind == llama::StateKind::sequence ? "sequence" : "session", bytes.size(),
                s.tokens.size(), s.streams.size(), s.arch_tag.empty() ? "" : ", arch ",
                s.arch_tag.c_str());
    for (size_t si = 0; si < s.streams.size(); ++si) {
      const llama::KvStream& st = s.streams[si];
      if (st.cells.empty()) continue;
      std::printf("stream %zu: %zu cells, V %s, %zu layers\n", si, st.cells.size(),
                  st.v_trans ? "transposed" : "row-major", st.layers.size());
      for (size_t il = 0; il < st.layers.size(); ++il) {
        const llama::KvLayer& l = st.layers[il];
        std::printf("  layer %zu: K type %d x %zu, V type %d x %zu\n", il, l.k_type,
                    llama::k_row_elements(l), l.v_type, llama::v_row_elements(l));
      }
    }
  });
}

// Atomic: a crash or a full disk never leaves a truncated file under `path`.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes);
}

// K+V elements of a snapshot's data stream.
size_t kv_elements(const llama::KvSnapshot& s) {
  size_t n = 0;
  for (const llama::KvLayer& l : s.data_stream().layers) {
    n += s.n_cells() * (llama::k_row_elements(l) + llama::v_row_elements(l));
  }
  return n;
}

struct LevelArgs {
  std::string level = "high";  // lossless | high | medium | low (unless --bits / --lossless)
  bool lossless = false;
  int bits = 6;
  CLI::Option* bits_opt = nullptr;
  size_t group_size = 32;
  size_t chunk_tokens = 0;  // 0: the level's default
};

QualityLevel parse_level(const std::string& name) {
  for (QualityLevel l :
       {QualityLevel::lossless, QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
    if (name == quality_level_name(l)) return l;
  }
  throw Error(ErrorCode::invalid_argument,
              "--level must be lossless, high, medium or low, not '" + name + "'");
}

bool uses_bits(const LevelArgs& a) {
  return a.bits_opt != nullptr && a.bits_opt->count() > 0;
}

std::string level_name(const LevelArgs& a) {
  if (a.lossless) return "lossless";
  if (uses_bits(a)) return std::to_string(a.bits) + "-bit";
  return "level " + a.level;
}

// The level chosen by --lossless / --bits / --level. `model` (may be null) gives the shape and
// RoPE of the quality levels; without it they are stored without pre-RoPE keys and without
// recomputed layers (both need the model), which the caller reports.
llama::CgkvLevel make_level(const LevelArgs& a, const llama::Model* model, size_t n_layers) {
  llama::CgkvLevel level;
  if (a.lossless || (!uses_bits(a) && parse_level(a.level) == QualityLevel::lossless)) {
    level = llama::CgkvLevel::exact();
  } else if (uses_bits(a)) {
    level = llama::CgkvLevel::bits(a.bits, a.group_size);
  } else if (model != nullptr) {
    level = llama::CgkvLevel::quality(parse_level(a.level), llama::model_cache_shape(*model),
                                      llama::model_rope_params(*model));
  } else {
    ModelShape shape;
    shape.n_layers = static_cast<int>(n_layers);
    shape.n_kv_heads = shape.head_dim = 1;
    // No model to recompute with or to read RoPE from: recomputed layers are stored, keys as is.
    level.quantized = quality_level_config_stored(parse_level(a.level), shape, nullptr);
  }
  if (a.chunk_tokens != 0) {
    level.lossless_chunk_tokens = a.chunk_tokens;
    level.quantized.block_tokens = a.chunk_tokens;
  }
  return level;
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
}

void add_pack(CLI::App& llama_cmd) {
  struct Args {
    std::string in, out, model;
    LevelArgs level;
  };
  auto* a = new Args;
  CLI::App* cmd = llama_cmd.add_subcommand(
      "pack", "compress a llama.cpp sequence or session state file into a .cgkv");
  cmd->add_option("STATE", a->in, "file from llama_state_seq_save_file / llama_state_save_file")
      ->required();
  cmd->add_option("-o,--output", a->out, "the .cgkv to write")->required();
  cmd->add_option("--model", a->model,
                  "GGUF model that wrote the state: recorded so restores into another model are "
                  "refused (optional)");
  add_level_options(cmd, a->level);
  cmd->callback([a] {
    const std::vector<uint8_t> bytes = read_file(a->in);
    llama::ModelIdentity identity;
    llama::ParseOptions options;
    std::unique_ptr<llama::Model> model;
    if (!a->model.empty()) {
      model = std::make_unique<llama::Model>(a->model);
      identity = model->identity();
      options.cell_ext = model->cell_ext();
    } else if (!a->level.lossless && !uses_bits(a->level) && a->level.level != "lossless") {
      std::fprintf(stderr,
                   "note: without --model, level %s stores keys as given and stores layer 0 "
                   "instead of recomputing it (both need the model): larger, lower quality\n",
                   a->level.level.c_str());
    }
    const llama::KvSnapshot s = llama::parse_state_file(bytes, options);
    if (a->model.empty()) {
      identity.architecture = s.arch_tag;
      identity.n_layer = static_cast<uint32_t>(s.data_stream().layers.size());
    }
    const std::vector<uint8_t> out = llama::snapshot_to_cgkv(
        s, identity, make_level(a->level, model.get(), s.data_stream().layers.size()));
    write_file(a->out, out);
    const size_t elements = kv_elements(s);
    std::printf(
        "%s state file, %zu tokens, %zu cells: %zu bytes -> %zu bytes (%.2fx smaller), %s, "
        "%.3f bits per K/V element (%.2fx vs fp16)\n",
        s.kind == llama::StateKind::sequence ? "sequence" : "session", s.tokens.size(), s.n_cells(),
        bytes.size(), out.size(),
        static_cast<double>(bytes.size()) / static_cast<double>(out.size()),
        level_name(a->level).c_str(),
        8.0 * static_cast<double>(out.size()) / static_cast<double>(elements),
        static_cast<double>(elements * 2) / static_cast<double>(out.size()));
  });
}

void add_unpack(CLI::App& llama_cmd) {
  struct Args {
    std::string in, out, model;
  };
  auto* a = new Args;
  CLI::App* cmd = llama_cmd.add_subcommand(
      "unpack", "rebuild a llama.cpp state file from a .cgkv written by pack (or demo)");
  cmd->add_option("CGKV", a->in, "the .cgkv file")->required();
  cmd->add_option("-o,--output", a->out, "the state file to write")->required();
  cmd->add_option("--model", a->model,
                  "GGUF model that wrote the state: needed when the file recomputes layers "
                  "(quality levels recompute layer 0 from the token ids)");
  cmd->callback([a] {
    const CgkvReader reader = CgkvReader::open_file(a->in);
    std::unique_ptr<llama::Model> model;
    if (!a->model.empty()) model = std::make_unique<llama::Model>(a->model);
    const llama::KvSnapshot s =
        model ? llama::cgkv_to_snapshot(reader, *model) : llama::cgkv_to_snapshot(reader);
    const std::vector<uint8_t> bytes = llama::build_state_file(s);
    write_file(a->out, bytes);
    std::printf(
        "%s state file, %zu tokens, %zu cells, %s: %zu bytes written to %s\n",
        s.kind == llama::StateKind::sequence ? "sequence" : "session", s.tokens.size(), s.n_cells(),
        reader.info().codec == ContainerCodec::lossless_fp16 ? "exact (lossless)" : "dequantized",
        bytes.size(), a->out.c_str());
  });
}

void add_demo(CLI::App& llama_cmd) {
  struct Args {
    std::string model, text, out, save_state,
        prompt = "Once upon a time, there was a little girl named Lily.";
    int prefix = 448, n_generate = 32;
    LevelArgs level;
  };
  auto* a = new Args;
  CLI::App* cmd = llama_cmd.add_subcommand(
      "demo",
      "capture a KV cache, store it in a .cgkv, read it back, restore it into a fresh "
      "context, generate");
  cmd->add_option("--model", a->model, "GGUF model (default: $CACHEGEN_MODEL)");
  CLI::Option* text =
      cmd->add_option("--text", a->text, "take the first --prefix tokens of this UTF-8 file");
  cmd->add_option("--prompt", a->prompt, "prompt text (without --text)")
      ->capture_default_str()
      ->excludes(text);
  cmd->add_option("--prefix", a->prefix, "tokens captured with --text")->capture_default_str();
  cmd->add_option("--generate", a->n_generate, "tokens to generate")->capture_default_str();
  cmd->add_option("-o,--output", a->out, "where the .cgkv goes (default: a temporary file)");
  cmd->add_option("--save-state", a->save_state,
                  "also write the captured state as a llama.cpp sequence state file (the bytes "
                  "llama_state_seq_save_file writes), e.g. to try `llama pack`");
  add_level_options(cmd, a->level);
  cmd->callback([a] {
    const llama::Model model(resolve_model(a->model));
    std::vector<int32_t> tokens;
    if (a->text.empty()) {
      tokens = model.tokenize(a->prompt, true);
    } else {
      const std::vector<uint8_t> t = read_file(a->text);
      tokens = model.tokenize(std::string(t.begin(), t.end()), true);
      if (a->prefix < 1 || tokens.size() < static_cast<size_t>(a->prefix) + 1) {
        throw Error(ErrorCode::invalid_argument,
                    "--text '" + a->text + "' has " + std::to_string(tokens.size()) +
                        " tokens, --prefix " + std::to_string(a->prefix) + " needs one more");
      }
      tokens.resize(static_cast<size_t>(a->prefix) + 1);
    }
    if (tokens.size() < 2) throw Error(ErrorCode::invalid_argument, "the prompt is too short");
    llama::ContextSettings cs;
    cs.n_ctx = static_cast<uint32_t>((tokens.size() + a->n_generate + 255) / 256 * 256);
    const auto generate = [&](llama::Context& ctx, int32_t first, int32_t pos, int n) {
      std::vector<int32_t> out{first};
      for (int i = 0; i < n; ++i) {
        const std::vector<float> logits = ctx.decode(std::span(&out.back(), 1), pos++, false);
        out.push_back(
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      }
      return out;
    };
    llama::Context original(model, cs);
    const std::span<const int32_t> head(tokens.data(), tokens.size() - 1);
    original.decode(head, 0, false);
    const llama::KvSnapshot snap = llama::capture_seq_state(original, head);
    if (!a->save_state.empty()) write_file(a->save_state, llama::build_state_file(snap));

    const std::string path = !a->out.empty()
                                 ? a->out
                                 : (std::filesystem::temp_directory_path() /
                                    ("cachegen_demo_" + std::to_string(::getpid()) + ".cgkv"))
                                       .string();
    const auto t0 = std::chrono::steady_clock::now();
    write_file(path, llama::snapshot_to_cgkv(
                         snap, snap.model,
                         make_level(a->level, &model, snap.data_stream().layers.size())));
    const auto t1 = std::chrono::steady_clock::now();
    const CgkvReader reader = CgkvReader::open_file(path);
    const llama::KvSnapshot back = llama::cgkv_to_snapshot(reader, model);
    llama::Context restored(model, cs);
    llama::restore_seq_state(restored, back);
    const auto t2 = std::chrono::steady_clock::now();
    const double file_bytes = static_cast<double>(reader.info().file_bytes);
    const size_t elements = kv_elements(snap);
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf("captured %zu tokens x %zu layers from %s (%s, flash attention off)\n", head.size(),
                snap.data_stream().layers.size(), a->text.empty() ? "the prompt" : a->text.c_str(),
                model.identity().architecture.c_str());
    std::printf(
        "wrote %s: %.0f bytes, %s, %.3f bits/element, %.2fx smaller than fp16 K/V (%zu bytes), "
        "state bytes %zu; write %.1f ms, read+restore %.1f ms\n",
        path.c_str(), file_bytes, level_name(a->level).c_str(),
        8 * file_bytes / static_cast<double>(elements),
        static_cast<double>(elements * 2) / file_bytes, elements * 2,
        llama::build_state(snap).size(), ms(t1 - t0), ms(t2 - t1));
    if (a->out.empty()) std::filesystem::remove(path);
    const int32_t pos = static_cast<int32_t>(head.size());
    const std::vector<int32_t> a_out = generate(original, tokens.back(), pos, a->n_generate);
    const std::vector<int32_t> b_out = generate(restored, tokens.back(), pos, a->n_generate);
    size_t same = 0;
    while (same < a_out.size() && a_out[same] == b_out[same]) ++same;
    size_t agree = 0;
    for (size_t i = 0; i < a_out.size(); ++i) agree += a_out[i] == b_out[i] ? 1 : 0;
    std::printf(
        "greedy continuation from the restored cache: first %zu/%zu tokens identical, %zu/%zu "
        "positions agree\n",
        same, a_out.size(), agree, a_out.size());
    if (a->text.empty()) std::printf("prompt:    %s\n", a->prompt.c_str());
    std::printf("exact:     ...%s\n", model.detokenize(a_out).c_str());
    std::printf("restored:  ...%s\n", model.detokenize(b_out).c_str());
  });
}

}  // namespace

void add_llama_commands(CLI::App& app) {
  add_eval(app);
  CLI::App* llama_cmd = app.add_subcommand("llama", "llama.cpp KV caches and state files");
  llama_cmd->require_subcommand(1);
  add_inspect(*llama_cmd);
  add_pack(*llama_cmd);
  add_unpack(*llama_cmd);
  add_demo(*llama_cmd);
}

}  // namespace cachegen::cli
