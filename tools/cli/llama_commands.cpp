// `cachegen eval`: the rate–quality table on a real model.
// `cachegen llama inspect STATE`: what a llama.cpp state file holds.
// `cachegen llama demo`: capture a real KV cache, compress it, restore it, continue generating.
#include "llama_commands.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/llama.h"

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

void add_demo(CLI::App& llama_cmd) {
  struct Args {
    std::string model, prompt = "Once upon a time, there was a little girl named Lily.";
    int bits = 6, n_generate = 32;
  };
  auto* a = new Args;
  CLI::App* cmd = llama_cmd.add_subcommand(
      "demo", "capture a KV cache, compress it, restore it into a fresh context, generate");
  cmd->add_option("--model", a->model, "GGUF model (default: $CACHEGEN_MODEL)");
  cmd->add_option("--prompt", a->prompt, "prompt text")->capture_default_str();
  cmd->add_option("--bits", a->bits, "quantization bits for K and V")->capture_default_str();
  cmd->add_option("--generate", a->n_generate, "tokens to generate")->capture_default_str();
  cmd->callback([a] {
    const llama::Model model(resolve_model(a->model));
    const std::vector<int32_t> prompt = model.tokenize(a->prompt, true);
    llama::ContextSettings cs;
    cs.n_ctx = static_cast<uint32_t>((prompt.size() + a->n_generate + 255) / 256 * 256);
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
    const std::span<const int32_t> head(prompt.data(), prompt.size() - 1);
    original.decode(head, 0, false);
    llama::KvSnapshot snap = llama::capture_seq_state(original, head);
    size_t fp16_bytes = 0, coded_bytes = 0;
    for (llama::KvLayer& layer : snap.data_stream().layers) {
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> x = kv == 0 ? llama::layer_k_float(layer) : llama::layer_v_float(layer);
        const size_t n_embd = kv == 0 ? llama::k_row_elements(layer) : llama::v_row_elements(layer);
        const std::vector<uint8_t> coded = encode_values(x, head.size(), n_embd, a->bits);
        const std::vector<Half> rec = decode_to_half(coded);
        for (size_t i = 0; i < x.size(); ++i) x[i] = half_to_float(rec[i]);
        fp16_bytes += x.size() * 2;
        coded_bytes += coded.size();
        if (kv == 0)
          llama::set_layer_k_float(layer, x);
        else
          llama::set_layer_v_float(layer, x);
      }
    }
    llama::Context restored(model, cs);
    llama::restore_seq_state(restored, snap);
    const int32_t pos = static_cast<int32_t>(head.size());
    const std::vector<int32_t> a_out = generate(original, prompt.back(), pos, a->n_generate);
    const std::vector<int32_t> b_out = generate(restored, prompt.back(), pos, a->n_generate);
    size_t same = 0;
    for (size_t i = 0; i < a_out.size(); ++i) same += a_out[i] == b_out[i] ? 1 : 0;
    std::printf(
        "captured %zu tokens x %u layers; K+V fp16 %zu bytes -> %zu coded bytes (%.2fx) "
        "at %d bits\n",
        head.size(), model.identity().n_layer, fp16_bytes, coded_bytes,
        static_cast<double>(fp16_bytes) / static_cast<double>(coded_bytes), a->bits);
    std::printf(
        "greedy continuation from the restored cache matches the exact one on %zu/%zu "
        "tokens\n",
        same, a_out.size());
    std::printf("prompt:    %s\n", a->prompt.c_str());
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
  add_demo(*llama_cmd);
}

}  // namespace cachegen::cli
