// `cachegen llama demo`: capture a real KV cache, write it as a .cgkv, read it back, restore it
// into a fresh context, continue generating; with the time of each step next to llama.cpp
// prefilling the same tokens in the same process.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/quality_levels.h"
#include "llama_cli.h"

namespace cachegen::cli {
namespace {

struct DemoArgs {
  std::string model, text, out, save_state,
      prompt = "Once upon a time, there was a little girl named Lily.";
  int prefix = 448, n_generate = 32, repeat = 3, threads = 2;
  bool json = false;
  LevelArgs level;
};

// The prompt's tokens: --prefix tokens of --text plus the one the continuation starts from, or
// the whole --prompt.
std::vector<int32_t> demo_tokens(const DemoArgs& a, const llama::Model& model) {
  if (a.prefix < 1) {
    throw Error(ErrorCode::invalid_argument,
                "--prefix must be at least 1, not " + std::to_string(a.prefix));
  }
  if (a.n_generate < 0) {
    throw Error(ErrorCode::invalid_argument,
                "--generate must be 0 or more, not " + std::to_string(a.n_generate));
  }
  if (a.repeat < 1) throw Error(ErrorCode::invalid_argument, "--repeat must be at least 1");
  if (a.threads < 1) throw Error(ErrorCode::invalid_argument, "--threads must be at least 1");
  std::vector<int32_t> tokens;
  if (a.text.empty()) {
    tokens = model.tokenize(a.prompt, true);
  } else {
    const std::vector<uint8_t> t = read_file_bytes(a.text);
    // Tokenize a growing head of the text, not all of it: 16 spare tokens keep the ones used
    // clear of a cut in mid-word.
    const size_t want = static_cast<size_t>(a.prefix) + 1 + 16;
    for (size_t bytes = want * 8;; bytes *= 2) {
      const size_t take = std::min(bytes, t.size());
      tokens =
          model.tokenize(std::string(t.begin(), t.begin() + static_cast<ptrdiff_t>(take)), true);
      if (tokens.size() >= want || take == t.size()) break;
    }
    if (tokens.size() < static_cast<size_t>(a.prefix) + 1) {
      throw Error(ErrorCode::invalid_argument,
                  "--text '" + a.text + "' has " + std::to_string(tokens.size()) +
                      " tokens, --prefix " + std::to_string(a.prefix) + " needs one more");
    }
    tokens.resize(static_cast<size_t>(a.prefix) + 1);
  }
  if (tokens.size() < 2) throw Error(ErrorCode::invalid_argument, "the prompt is too short");
  const int64_t need = static_cast<int64_t>(tokens.size()) + a.n_generate;
  if (model.n_ctx_train() > 0 && need > model.n_ctx_train()) {
    throw Error(ErrorCode::invalid_argument,
                "the prompt (" + std::to_string(tokens.size()) + " tokens) plus --generate " +
                    std::to_string(a.n_generate) + " exceeds the model's context of " +
                    std::to_string(model.n_ctx_train()) + " tokens");
  }
  return tokens;
}

struct LevelResult {
  std::string level, path;
  double bytes = 0, bits_per_element = 0, write_ms = 0, restore_ms = 0;
  size_t identical_tokens = 0, agree = 0;
  uint64_t model_evaluations = 0;  // llama_decode calls made by the restores (must be 0)
  std::vector<int32_t> continuation;
};

}  // namespace

void add_demo(CLI::App& llama_cmd) {
  auto a = std::make_shared<DemoArgs>();  // kept by the callback, as long as the app
  CLI::App* cmd = llama_cmd.add_subcommand(
      "demo",
      "capture a KV cache, store it in a .cgkv, read it back, restore it into a fresh "
      "context, generate; times next to llama.cpp's prefill");
  cmd->add_option("--model", a->model, "GGUF model (default: $CACHEGEN_MODEL)");
  CLI::Option* text =
      cmd->add_option("--text", a->text, "take the first --prefix tokens of this UTF-8 file");
  cmd->add_option("--prompt", a->prompt, "prompt text (without --text)")
      ->capture_default_str()
      ->excludes(text);
  cmd->add_option("--prefix", a->prefix, "tokens captured with --text")->capture_default_str();
  cmd->add_option("--generate", a->n_generate, "tokens to generate")->capture_default_str();
  cmd->add_option("--repeat", a->repeat,
                  "time restore and prefill this many times each and report the fastest")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "llama.cpp threads")->capture_default_str();
  cmd->add_option("-o,--output", a->out, "where the .cgkv goes (default: a temporary file)");
  cmd->add_option("--save-state", a->save_state,
                  "also write the captured state as a llama.cpp sequence state file (the bytes "
                  "llama_state_seq_save_file writes), e.g. to try `llama pack`");
  cmd->add_flag("--json", a->json,
                "one JSON object (an array of them with --level all) instead of text");
  add_level_options(cmd, a->level);
  cmd->callback([a] {
    const llama::Model model(resolve_model(a->model));
    const std::vector<int32_t> tokens = demo_tokens(*a, model);
    llama::ContextSettings cs;
    cs.n_threads = a->threads;
    cs.n_ctx = static_cast<uint32_t>((tokens.size() + static_cast<size_t>(a->n_generate) + 255) /
                                     256 * 256);
    llama::Context original(model, cs);
    const std::span<const int32_t> head(tokens.data(), tokens.size() - 1);
    // llama.cpp prefilling the prefix: the cost a restore must beat (fastest of --repeat).
    double prefill_ms = 1e300;
    for (int r = 0; r < a->repeat; ++r) {
      original.clear();
      const auto t0 = std::chrono::steady_clock::now();
      original.decode(head, 0, false);
      prefill_ms = std::min(prefill_ms, ms_since(t0));
    }
    const llama::KvSnapshot snap = llama::capture_seq_state(original, head);
    if (!a->save_state.empty()) write_file_atomic(a->save_state, llama::build_state_file(snap));
    const int32_t pos = static_cast<int32_t>(head.size());
    const std::vector<int32_t> exact = generate(original, tokens.back(), pos, a->n_generate);
    const size_t elements = kv_elements(snap);

    std::vector<std::string> levels{a->level.level};
    if (a->level.level == "all" && !uses_bits(a->level) && !a->level.lossless) {
      levels.clear();
      for (const QualityLevelRow& row : kQualityLevels) levels.emplace_back(row.name);
    }
    std::vector<LevelResult> results;
    for (const std::string& name : levels) {
      LevelArgs la = a->level;
      la.level = name;
      LevelResult r;
      r.level = uses_bits(la) || la.lossless ? level_name(la) : name;
      r.path = !a->out.empty() && levels.size() == 1
                   ? a->out
                   : (std::filesystem::temp_directory_path() /
                      ("cachegen_demo_" + std::to_string(::getpid()) + "_" + name + ".cgkv"))
                         .string();
      const auto t0 = std::chrono::steady_clock::now();
      write_file_atomic(r.path, llama::snapshot_to_cgkv(
                                    snap, snap.model,
                                    make_encoding(la, &model, snap.data_stream().layers.size())));
      r.write_ms = ms_since(t0);
      // Restore: read + decode + restore into a context made beforehand (a prefill needs one
      // too), fastest of --repeat.
      r.restore_ms = 1e300;
      std::unique_ptr<llama::Context> restored;
      const uint64_t evals_before = llama::model_evaluations();
      for (int rep = 0; rep < a->repeat; ++rep) {
        restored = std::make_unique<llama::Context>(model, cs);
        const auto t1 = std::chrono::steady_clock::now();
        const CgkvReader reader = CgkvReader::open_file(r.path);
        const llama::KvSnapshot back = llama::cgkv_to_snapshot(reader, model);
        llama::restore_seq_state(*restored, back);
        r.restore_ms = std::min(r.restore_ms, ms_since(t1));
        r.bytes = static_cast<double>(reader.info().file_bytes);
      }
      r.model_evaluations = llama::model_evaluations() - evals_before;
      r.bits_per_element = 8 * r.bytes / static_cast<double>(elements);
      if (a->out.empty() || levels.size() > 1) std::filesystem::remove(r.path);
      r.continuation = generate(*restored, tokens.back(), pos, a->n_generate);
      while (r.identical_tokens < exact.size() &&
             exact[r.identical_tokens] == r.continuation[r.identical_tokens]) {
        ++r.identical_tokens;
      }
      for (size_t i = 0; i < exact.size(); ++i) r.agree += exact[i] == r.continuation[i] ? 1 : 0;
      results.push_back(std::move(r));
    }

    if (a->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const LevelResult& r : results) {
        out.push_back({{"model", model.path()},
                       {"tokens", head.size()},
                       {"level", r.level},
                       {"bytes", r.bytes},
                       {"bits_per_element", r.bits_per_element},
                       {"write_ms", r.write_ms},
                       {"restore_ms", r.restore_ms},
                       {"prefill_ms", prefill_ms},
                       {"restore_model_evaluations", r.model_evaluations},
                       {"generated_tokens", exact.size()},
                       {"identical_tokens", r.identical_tokens},
                       {"agreeing_tokens", r.agree}});
      }
      std::printf("%s\n", (results.size() == 1 ? out[0] : out).dump().c_str());
      return;
    }
    std::printf(
        "captured %zu tokens x %zu layers from %s (%s, flash attention off); llama.cpp "
        "prefills them in %.1f ms\n",
        head.size(), snap.data_stream().layers.size(),
        a->text.empty() ? "the prompt" : a->text.c_str(), model.identity().architecture.c_str(),
        prefill_ms);
    for (const LevelResult& r : results) {
      std::printf(
          "%s: %.0f bytes, %.3f bits/element, %.2fx smaller than fp16 K/V (%zu bytes); write "
          "%.1f ms, read+restore %.1f ms (%.2fx the prefill); continuation: first %zu/%zu tokens "
          "identical, %zu agree\n",
          r.level.c_str(), r.bytes, r.bits_per_element, static_cast<double>(elements * 2) / r.bytes,
          elements * 2, r.write_ms, r.restore_ms, r.restore_ms / prefill_ms, r.identical_tokens,
          exact.size(), r.agree);
    }
    if (a->text.empty()) std::printf("prompt:    %s\n", a->prompt.c_str());
    std::printf("exact:     ...%s\n", model.detokenize(exact).c_str());
    for (const LevelResult& r : results) {
      std::printf("%-10s ...%s\n", (r.level + ":").c_str(),
                  model.detokenize(r.continuation).c_str());
    }
  });
}

}  // namespace cachegen::cli
