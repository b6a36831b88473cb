// `cachegen llama run`: a prompt answered with its longest stored prefix loaded from a context
// store instead of recomputed; the new chunks written back after the answer.
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cachegen/context_loader.h"
#include "cachegen/context_store.h"
#include "cachegen/error.h"
#include "cachegen/llama_context.h"
#include "cachegen/planner_sim.h"
#include "cachegen/quality_levels.h"
#include "cachegen/store.h"
#include "llama_cli.h"

namespace cachegen::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string model, prompt, prompt_file, store, level, write_levels = "lossless,high,medium,low";
  double deadline_ms = -1, prefill_tokens_per_s = 2000, initial_mbps = 1000;
  std::string policy = "deadline-planner";
  int n_predict = 32, threads = 2;
  size_t chunk_tokens = 256;
  bool json = false, no_write = false;
};

std::vector<QualityLevel> parse_levels(const std::string& list) {
  std::vector<QualityLevel> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(parse_quality_level(item));
  }
  return out;
}

// The levels' quality loss for the planner: docs/QUALITY_LEVELS.md's measured KL.
std::vector<std::pair<std::string, double>> level_quality() {
  std::vector<std::pair<std::string, double>> out;
  for (const LevelSpec& l : measured_quality_levels()) out.emplace_back(l.name, l.kl);
  return out;
}

}  // namespace

void add_run(CLI::App& llama_cmd) {
  auto a = std::make_shared<RunArgs>();  // kept by the callback, as long as the app
  CLI::App* cmd = llama_cmd.add_subcommand(
      "run",
      "answer a prompt, loading its longest stored prefix from a context store instead of "
      "recomputing it, then store the new chunks");
  cmd->add_option("--model", a->model, "GGUF model (default: $CACHEGEN_MODEL)");
  CLI::Option* file = cmd->add_option("--prompt-file", a->prompt_file, "UTF-8 prompt file");
  cmd->add_option("--prompt", a->prompt, "prompt text")->excludes(file);
  cmd->add_option("--store", a->store, "context store: file://DIR or redis://HOST:PORT/DB")
      ->required();
  CLI::Option* level = cmd->add_option(
      "--level", a->level, "load every chunk at this level (lossless, high, medium, low)");
  cmd->add_option("--deadline-ms", a->deadline_ms,
                  "load the best levels that fit this deadline; what does not arrive in time is "
                  "recomputed")
      ->excludes(level);
  cmd->add_option("--policy", a->policy,
                  "without --level: the planner choosing each chunk's level or recompute "
                  "(deadline-planner, cachegen-alg1, fixed:LEVEL)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", a->prefill_tokens_per_s,
                  "the planner's price of recomputing (this machine's prefill rate)")
      ->capture_default_str();
  cmd->add_option("--initial-mbps", a->initial_mbps,
                  "the planner's throughput estimate before the first chunk arrives")
      ->capture_default_str();
  cmd->add_option("--n-predict", a->n_predict, "tokens to generate")->capture_default_str();
  cmd->add_option("--chunk-tokens", a->chunk_tokens, "tokens per stored chunk")
      ->capture_default_str();
  cmd->add_option("--write-levels", a->write_levels, "levels new chunks are stored at")
      ->capture_default_str();
  cmd->add_flag("--no-write", a->no_write, "do not store new chunks");
  cmd->add_option("--threads", a->threads, "llama.cpp threads")->capture_default_str();
  cmd->add_flag("--json", a->json, "one JSON object instead of text");
  cmd->callback([a] {
    if (a->n_predict < 1) {
      throw Error(ErrorCode::invalid_argument,
                  "--n-predict must be at least 1, not " + std::to_string(a->n_predict));
    }
    if (a->threads < 1) throw Error(ErrorCode::invalid_argument, "--threads must be at least 1");
    if (a->prompt.empty() && a->prompt_file.empty()) {
      throw Error(ErrorCode::invalid_argument, "give --prompt-file or --prompt");
    }
    const std::vector<QualityLevel> write_levels = parse_levels(a->write_levels);
    if (!a->level.empty()) parse_quality_level(a->level);  // a bad name fails before any work
    const std::unique_ptr<PlannerPolicy> policy = make_planner_policy(a->policy);
    const llama::Model model(resolve_model(a->model));
    std::string prompt = a->prompt;
    if (!a->prompt_file.empty()) {
      const std::vector<uint8_t> b = read_file_bytes(a->prompt_file);
      prompt.assign(b.begin(), b.end());
    }
    const std::vector<int32_t> tokens = model.tokenize(prompt, true);
    const size_t n_prompt = tokens.size();
    if (n_prompt < 2) throw Error(ErrorCode::invalid_argument, "the prompt is too short");
    if (model.n_ctx_train() > 0 &&
        static_cast<int64_t>(n_prompt) + a->n_predict > model.n_ctx_train()) {
      throw Error(ErrorCode::invalid_argument,
                  "the prompt (" + std::to_string(n_prompt) + " tokens) plus --n-predict " +
                      std::to_string(a->n_predict) + " exceeds the model's context of " +
                      std::to_string(model.n_ctx_train()));
    }
    const std::unique_ptr<Store> store = open_store(a->store);
    ContextStoreOptions so;
    so.chunk_tokens = a->chunk_tokens;
    ContextStore cs(*store, llama::context_fingerprint(model.identity()), so);
    llama::ContextSettings settings;
    settings.n_threads = a->threads;
    settings.n_ctx =
        static_cast<uint32_t>((n_prompt + static_cast<size_t>(a->n_predict) + 255) / 256 * 256);
    llama::Context ctx(model, settings);

    // The request: lookup, load, restore, prefill of the rest, first token.
    const Clock::time_point t0 = Clock::now();
    std::string why_lookup;
    std::vector<StoredChunk> found = cs.lookup(tokens, &why_lookup);
    const size_t stored_chunks = found.size();
    found.resize(std::min(found.size(), (n_prompt - 1) / cs.chunk_tokens()));  // 1 token to run
    const double lookup_ms = ms_since(t0);
    CostModel cost;
    cost.prefill_tokens_per_s = a->prefill_tokens_per_s;
    LevelChooser chooser;
    if (!a->level.empty()) {
      chooser = fixed_level_chooser(a->level);
    } else {
      try {
        chooser = planned_chooser(
            *policy, found, level_quality(), cost,
            a->deadline_ms >= 0 ? a->deadline_ms / 1000 : std::numeric_limits<double>::infinity(),
            a->initial_mbps * 1e6 / 8);
      } catch (const Error&) {  // no level stored for every chunk: load what one level covers
        chooser = fixed_level_chooser(found.empty() || found[0].levels.empty()
                                          ? std::string("lossless")
                                          : found[0].levels[0].level);
      }
    }
    llama::SnapshotAssembler sink(model);
    LoadOptions lo;
    if (a->deadline_ms >= 0) lo.deadline_s = a->deadline_ms / 1000;  // later chunks: recomputed
    const LoadReport load = load_prefix(cs, tokens, found, chooser, sink, lo);
    const Clock::time_point r0 = Clock::now();
    const size_t reused = sink.n_cells();
    if (reused > 0) llama::restore_seq_state(ctx, sink.snapshot());
    const double restore_ms = ms_since(r0);
    const Clock::time_point p0 = Clock::now();
    const int32_t first = argmax_token(
        ctx.decode(std::span(tokens).subspan(reused), static_cast<int32_t>(reused), false));
    const double prefill_ms = ms_since(p0);
    const double ttft_ms = ms_since(t0);
    const std::vector<int32_t> out =
        generate(ctx, first, static_cast<int32_t>(n_prompt), a->n_predict - 1);
    const double total_ms = ms_since(t0);
    const std::string text = model.detokenize(out);

    // After the answer: the chunks the store did not have.
    size_t written = 0;
    double write_ms = 0;
    if (!a->no_write && !write_levels.empty()) {
      const Clock::time_point w0 = Clock::now();
      std::vector<int32_t> decoded = tokens;
      decoded.insert(decoded.end(), out.begin(), out.end() - 1);  // the last was not decoded
      const llama::KvSnapshot snap = llama::capture_seq_state(ctx, decoded);
      // From the first chunk the store lacks, or the first that failed to load (rewritten).
      const size_t from = load.stop == LoadStop::failed || load.stop == LoadStop::missing
                              ? load.chunks_loaded
                              : stored_chunks;
      written = llama::store_chunks(cs, model, snap, tokens, from, write_levels);
      write_ms = ms_since(w0);
    }
    std::string levels;
    for (const std::string& l : load.levels) levels += (levels.empty() ? "" : ",") + l;
    if (a->json) {
      const nlohmann::json j = {{"prompt_tokens", n_prompt},
                                {"stored_chunks", stored_chunks},
                                {"reused_tokens", reused},
                                {"recomputed_tokens", n_prompt - reused},
                                {"bytes_fetched", load.bytes_fetched},
                                {"levels", load.levels},
                                {"stop_reason", load.stop_reason},
                                {"lookup_ms", lookup_ms},
                                {"fetch_ms", load.fetch_s * 1000},
                                {"decode_ms", load.decode_s * 1000},
                                {"load_ms", load.load_s * 1000},
                                {"restore_ms", restore_ms},
                                {"prefill_ms", prefill_ms},
                                {"ttft_ms", ttft_ms},
                                {"total_ms", total_ms},
                                {"written_chunks", written},
                                {"write_ms", write_ms},
                                {"text", text}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf(
        "prompt %zu tokens: %zu reused from %zu stored chunks (%s), %zu recomputed; %llu bytes "
        "fetched\n",
        n_prompt, reused, stored_chunks, levels.empty() ? "none" : levels.c_str(),
        n_prompt - reused, static_cast<unsigned long long>(load.bytes_fetched));
    if (!load.stop_reason.empty()) std::printf("load stopped: %s\n", load.stop_reason.c_str());
    if (!why_lookup.empty()) std::printf("lookup stopped: %s\n", why_lookup.c_str());
    std::printf(
        "time to first token %.1f ms = lookup %.1f + load %.1f (fetch %.1f, decode %.1f) + "
        "restore %.1f + prefill of the rest %.1f\n",
        ttft_ms, lookup_ms, load.load_s * 1000, load.fetch_s * 1000, load.decode_s * 1000,
        restore_ms, prefill_ms);
    std::printf("stored %zu new chunks in %.1f ms (after the answer)\n", written, write_ms);
    std::printf("answer: %s\n", text.c_str());
  });
}

}  // namespace cachegen::cli
