// `cachegen bench stream`: loading stored contexts from a real redis-server over loopback TCP,
// the reading side shaped to a bandwidth trace (a token bucket on received bytes), chunks cut
// from real KV captures and coded at every quality level, one JSON row per policy and trace.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cachegen/container.h"
#include "cachegen/context_loader.h"
#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/npy.h"
#include "cachegen/planner_sim.h"
#include "cachegen/quality_levels.h"
#include "cachegen/store.h"
#include "commands.h"

#ifdef CACHEGEN_WITH_LLAMA
#include "cachegen/llama.h"
#endif

namespace cachegen::cli {
namespace {

// llama.cpp's prefill rate for `tokens` with the GGUF at `path` (fastest of 3), or 0 when this
// build has no llama.cpp or there is no such file.
double measured_prefill_tokens_per_s([[maybe_unused]] const std::string& path,
                                     [[maybe_unused]] std::span<const int32_t> tokens) {
#ifdef CACHEGEN_WITH_LLAMA
  if (!std::filesystem::exists(path)) return 0;
  const llama::Model model(path);
  llama::ContextSettings cs;
  cs.n_threads = 1;
  cs.n_ctx = static_cast<uint32_t>((tokens.size() + 255) / 256 * 256);
  llama::Context ctx(model, cs);
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    ctx.clear();
    const auto t0 = std::chrono::steady_clock::now();
    ctx.decode(tokens, 0, false);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(tokens.size()) / best;
#else
  return 0;
#endif
}

using Clock = std::chrono::steady_clock;

// A redis-server child on a free loopback port, stopped on destruction.
class RedisChild {
 public:
  explicit RedisChild(const std::string& binary) {
    for (int attempt = 0; attempt < 20 && pid_ <= 0; ++attempt) {
      port_ = 20000 + static_cast<int>((::getpid() * 7919 + attempt * 104729) % 30000);
      const std::string port = std::to_string(port_);
      pid_ = ::fork();
      if (pid_ == 0) {
        std::freopen("/dev/null", "w", stdout);
        std::freopen("/dev/null", "w", stderr);
        ::execlp(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--loglevel", "warning",
                 static_cast<char*>(nullptr));
        ::_exit(127);
      }
      for (int i = 0; i < 100; ++i) {
        try {
          store_ = open_store("redis://127.0.0.1:" + port + "/0");
          return;
        } catch (const Error&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) break;  // exited: port taken, retry
      }
      stop();
    }
    throw Error(ErrorCode::unavailable, "bench stream: could not start " + binary);
  }
  ~RedisChild() { stop(); }
  Store& store() { return *store_; }
  int port() const { return port_; }

 private:
  void stop() {
    store_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  std::unique_ptr<Store> store_;
};

// Reads through `inner` (the real Redis connection) and then holds each value back until it
// would have arrived at the current chunk's bandwidth: a token bucket on received bytes.
class ShapedStore final : public Store {
 public:
  explicit ShapedStore(Store& inner) : inner_(inner) {}
  std::atomic<double> bytes_per_s{1e9};
  void put(std::string_view k, std::span<const uint8_t> v) override { inner_.put(k, v); }
  std::optional<std::vector<uint8_t>> try_get(std::string_view k) override {
    const Clock::time_point t0 = Clock::now();
    std::optional<std::vector<uint8_t>> v = inner_.try_get(k);
    if (v) {
      const auto due =
          t0 + std::chrono::duration<double>(static_cast<double>(v->size()) / bytes_per_s.load());
      std::this_thread::sleep_until(due);
    }
    return v;
  }
  bool exists(std::string_view k) override { return inner_.exists(k); }
  bool remove(std::string_view k) override { return inner_.remove(k); }
  std::vector<std::string> list(std::string_view p) override { return inner_.list(p); }
  std::string url() const override { return inner_.url() + " (shaped)"; }
  GcResult gc(std::chrono::milliseconds grace) override { return inner_.gc(grace); }

 private:
  Store& inner_;
};

// Decodes every chunk it gets, as an engine would before restoring it.
struct DecodingSink : ChunkSink {
  void decode(const StoredChunk& c, std::string_view, std::span<const uint8_t> value) override {
    const CgkvReader r = CgkvReader::from_bytes(std::vector<uint8_t>(value.begin(), value.end()));
    if (r.read_tokens(0, c.n_tokens).empty()) throw Error(ErrorCode::corrupt_input, "empty");
  }
};

struct Context {
  std::vector<int32_t> tokens;
  std::vector<StoredChunk> chunks;
  double elements_per_token = 0;
};

// One chunk of a capture [n_layers, 2, n_tokens, heads, dim] at a level, with its token ids.
std::vector<uint8_t> encode_chunk(const NpyArray& kv, std::span<const int32_t> tokens, size_t first,
                                  size_t n, const std::string& level) {
  ModelShape shape;
  shape.n_layers = static_cast<int>(kv.shape[0]);
  shape.n_kv_heads = static_cast<int>(kv.shape[3]);
  shape.head_dim = static_cast<int>(kv.shape[4]);
  const size_t T = kv.shape[2], H = kv.shape[3], D = kv.shape[4], L = kv.shape[0];
  const Half* src = reinterpret_cast<const Half*>(kv.data.data());
  std::vector<Half> part(L * 2 * n * H * D);
  for (size_t l = 0; l < L * 2; ++l) {
    std::copy_n(src + (l * T + first) * H * D, n * H * D,
                part.begin() + static_cast<ptrdiff_t>(l * n * H * D));
  }
  const std::vector<CgkvBlob> blobs{token_ids_blob(tokens.subspan(first, n))};
  const QualityLevel q = parse_quality_level(level);
  if (q == QualityLevel::lossless) return write_cgkv_lossless(shape, part, n, n, blobs, 3);
  KVCacheConfig cfg = quality_level_config_stored(q, shape, nullptr);  // no model: layer 0 stored
  cfg.block_tokens =
      std::max(cfg.block_tokens, (n + cfg.group_size - 1) / cfg.group_size * cfg.group_size);
  KVCache cache = KVCacheBuilder::for_model(shape, cfg);
  const size_t plane = n * H * D;
  for (size_t l = 0; l < L; ++l) {
    cache.layers[l].append({part.data() + 2 * l * plane, KVDType::f16, H, n, D, true},
                           {part.data() + (2 * l + 1) * plane, KVDType::f16, H, n, D, true});
  }
  return write_cgkv(cache, blobs);
}

struct Args {
  std::string kv_dir = "../shared/data/kv", model = "stories260K", redis = "redis-server";
  size_t chunk_tokens = 64, seeds = 3;
  double deadline_s = 0, prefill_tokens_per_s = 0;
  bool json = false;
};

}  // namespace

void add_bench_stream(CLI::App& bench) {
  auto a = std::make_shared<Args>();  // kept by the callback, as long as the app
  CLI::App* cmd = bench.add_subcommand(
      "stream",
      "load stored contexts from a real redis-server over a shaped link: every policy on the "
      "paper's and sudden-drop bandwidth traces");
  cmd->add_option("--kv-dir", a->kv_dir, "folder of MODEL_dev_ctxNN.npy KV captures")
      ->capture_default_str();
  cmd->add_option("--model", a->model, "capture name prefix")->capture_default_str();
  cmd->add_option("--chunk-tokens", a->chunk_tokens, "tokens per chunk")->capture_default_str();
  cmd->add_option("--seeds", a->seeds, "traces per context")->capture_default_str();
  cmd->add_option("--deadline-s", a->deadline_s,
                  "load deadline (default: the context at level medium over the trace's "
                  "1 Gbit/s-equivalent link)");
  cmd->add_option("--prefill-tokens-per-s", a->prefill_tokens_per_s,
                  "price of recomputing (default: two settings, the model's prefill rate "
                  "measured here (2000 tokens/s without llama.cpp or the model) and 200)");
  cmd->add_option("--redis-server", a->redis, "redis-server binary")->capture_default_str();
  cmd->add_flag("--json", a->json, "JSON rows only");
  cmd->callback([a] {
    RedisChild redis(a->redis);
    ShapedStore shaped(redis.store());
    ContextStoreOptions so;
    so.chunk_tokens = a->chunk_tokens;
    ContextStore cs(shaped, "bench:" + a->model, so);
    std::vector<std::string> level_names;
    for (const QualityLevelRow& row : kQualityLevels) level_names.emplace_back(row.name);
    std::vector<std::pair<std::string, double>> kl;
    for (const LevelSpec& l : measured_quality_levels()) kl.emplace_back(l.name, l.kl);
    std::vector<Context> contexts;
    for (int i = 0; i < 100; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "%s_dev_ctx%02d", a->model.c_str(), i);
      const std::filesystem::path p =
          std::filesystem::path(a->kv_dir) / (std::string(name) + ".npy");
      if (!std::filesystem::exists(p)) break;
      const NpyArray kv = read_npy(p.string());
      const NpyArray tk = read_npy(
          (std::filesystem::path(a->kv_dir) / (std::string(name) + "_tokens.npy")).string());
      if (kv.dtype != NpyDType::f16 || kv.shape.size() != 5) {
        throw Error(ErrorCode::corrupt_input, p.string() + ": not an fp16 [L, 2, T, H, D] capture");
      }
      Context c;
      for (size_t t = 0; t < tk.size(); ++t) {
        c.tokens.push_back(tk.dtype == NpyDType::i64 ? static_cast<int32_t>(tk.as<int64_t>()[t])
                                                     : tk.as<int32_t>()[t]);
      }
      c.elements_per_token = static_cast<double>(kv.shape[0] * 2 * kv.shape[3] * kv.shape[4]);
      for (size_t ch = 0; ch < c.tokens.size() / a->chunk_tokens; ++ch) {
        for (const std::string& level : level_names) {
          cs.put_chunk(c.tokens, ch, level,
                       encode_chunk(kv, c.tokens, ch * a->chunk_tokens, a->chunk_tokens, level));
        }
      }
      c.chunks = cs.lookup(c.tokens);
      contexts.push_back(std::move(c));
    }
    if (contexts.empty()) {
      throw Error(ErrorCode::not_found,
                  "bench stream: no " + a->model + "_dev_ctxNN.npy in " + a->kv_dir);
    }
    const double ept = contexts[0].elements_per_token;
    const double link_scale = ept / kPaperElementsPerToken;  // a chunk takes the paper's time
    uint64_t medium_bytes = 0;
    for (const StoredChunk& c : contexts[0].chunks) medium_bytes += c.find("medium")->bytes;
    const double deadline = a->deadline_s > 0
                                ? a->deadline_s
                                : static_cast<double>(medium_bytes) * 8 / (1e9 * link_scale);
    // Recompute priced at the model's own prefill rate here (measured when this build has
    // llama.cpp and the model is found), and at a large model's: 200 tokens/s.
    std::vector<double> prefill = {2000, 200};
    if (const double m = measured_prefill_tokens_per_s(
            (std::filesystem::path(a->kv_dir) / ".." / ".." / "models" / (a->model + ".gguf"))
                .string(),
            contexts[0].tokens);
        m > 0) {
      prefill[0] = m;
    }
    if (a->prefill_tokens_per_s > 0) prefill = {a->prefill_tokens_per_s};
    const std::vector<std::string> policies = {"fixed:lossless", "fixed:high",
                                               "fixed:medium",   "fixed:low",
                                               "cachegen-alg1",  "deadline-planner"};
    if (!a->json) {
      std::printf(
          "redis-server on 127.0.0.1:%d; %zu contexts x %zu chunks of %zu tokens; "
          "deadline %.1f ms; link = the paper's traces scaled by %.3g\n",
          redis.port(), contexts.size(), contexts[0].chunks.size(), a->chunk_tokens,
          deadline * 1000, link_scale);
    }
    for (const double rate : prefill) {
      for (const std::string trace_kind : {"paper-uniform", "drop-10x"}) {
        for (const std::string& policy_name : policies) {
          const auto policy = make_planner_policy(policy_name);
          std::vector<SimResult> results;
          for (size_t ci = 0; ci < contexts.size(); ++ci) {
            const Context& c = contexts[ci];
            for (size_t seed = 0; seed < a->seeds; ++seed) {
              const size_t n = c.chunks.size();
              const BandwidthTrace trace =
                  trace_kind == "paper-uniform"
                      ? paper_uniform_trace(c.elements_per_token, n, 1000 * ci + seed)
                      : step_trace(10e9 / 8 * link_scale, 1e9 / 8 * link_scale, n / 4, n);
              CostModel cost;
              cost.prefill_tokens_per_s = rate;
              LevelChooser chooser =
                  planned_chooser(*policy, c.chunks, kl, cost, deadline, 1e9 / 8 * link_scale);
              auto inner = chooser.choose;
              chooser.choose = [&, inner](const StoredChunk& ch, const LoadProgress& p) {
                shaped.bytes_per_s =
                    trace.bytes_per_s[std::min(ch.index, trace.bytes_per_s.size() - 1)];
                return inner(ch, p);
              };
              DecodingSink sink;
              LoadOptions lo;
              lo.deadline_s = deadline;
              const LoadReport r = load_prefix(cs, c.tokens, c.chunks, chooser, sink, lo);
              SimResult s;
              const size_t rest = (n - r.chunks_loaded) * a->chunk_tokens;
              s.load_s = r.load_s + static_cast<double>(rest) / rate;  // recompute, priced
              s.met_deadline = s.load_s <= deadline;
              s.bytes = r.bytes_fetched + rest * 4;
              double kl_sum = 0;
              for (const std::string& l : r.levels) {
                for (const auto& [name, k] : kl) kl_sum += name == l ? k : 0;
              }
              s.mean_kl = kl_sum / static_cast<double>(n);
              s.bits_per_element =
                  static_cast<double>(s.bytes) * 8 /
                  (static_cast<double>(n * a->chunk_tokens) * c.elements_per_token);
              results.push_back(s);
            }
          }
          const SimSummary sum = summarize(results);
          const nlohmann::json row = {{"policy", policy_name},
                                      {"trace", trace_kind},
                                      {"prefill_tokens_per_s", rate},
                                      {"deadline_s", deadline},
                                      {"loads", sum.n_loads},
                                      {"deadline_met_fraction", sum.deadline_met_fraction},
                                      {"mean_load_s", sum.mean_load_s},
                                      {"mean_bits_per_element", sum.mean_bits_per_element},
                                      {"mean_kl", sum.mean_kl}};
          std::printf("%s\n", row.dump().c_str());
          std::fflush(stdout);
        }
      }
    }
  });
}

}  // namespace cachegen::cli
