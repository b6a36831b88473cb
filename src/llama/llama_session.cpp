// Model, Context, capture and restore: the only code that calls into llama.cpp's runtime.
#include <gguf.h>
#include <llama.h>
#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "llama/layer0_kv.h"

namespace cachegen::llama {
namespace {

std::atomic<uint64_t> g_model_evaluations{0};

void quiet_log(ggml_log_level, const char*, void*) {}

void init_backend_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("CACHEGEN_LLAMA_LOG") == nullptr) llama_log_set(quiet_log, nullptr);
    llama_backend_init();
  });
}

// XXH3-64 of the bytes before the tensor data: header, metadata and tensor infos.
uint64_t gguf_header_hash(const std::string& path) {
  gguf_init_params params{};
  params.no_alloc = true;
  params.ctx = nullptr;
  gguf_context* g = gguf_init_from_file(path.c_str(), params);
  if (g == nullptr) {
    throw Error(ErrorCode::corrupt_input, "llama: '" + path + "' is not a readable GGUF file");
  }
  const size_t header_bytes = gguf_get_data_offset(g);
  gguf_free(g);
  std::ifstream f(path, std::ios::binary);
  std::vector<char> buf(header_bytes);
  if (!f.read(buf.data(), static_cast<std::streamsize>(buf.size()))) {
    throw Error(ErrorCode::io_error, "llama: cannot read the GGUF header of '" + path + "'");
  }
  return XXH3_64bits(buf.data(), buf.size());
}

std::string meta_string(const llama_model* model, const char* key) {
  char buf[256];
  const int32_t n = llama_model_meta_val_str(model, key, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf);
}

std::string type_name(int32_t type) {
  return type >= 0 && type < GGML_TYPE_COUNT ? ggml_type_name(static_cast<ggml_type>(type))
                                             : "type " + std::to_string(type);
}

}  // namespace

uint64_t model_evaluations() {
  return g_model_evaluations.load();
}

Model::Model(const std::string& gguf_path) : path_(gguf_path) {
  init_backend_once();
  if (!std::filesystem::exists(gguf_path)) {
    throw Error(ErrorCode::not_found, "llama: model file '" + gguf_path + "' not found");
  }
  identity_.gguf_header_hash = gguf_header_hash(gguf_path);
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  model_ = llama_model_load_from_file(gguf_path.c_str(), params);
  if (model_ == nullptr) {
    throw Error(ErrorCode::corrupt_input, "llama: llama.cpp could not load '" + gguf_path + "'");
  }
  identity_.architecture = meta_string(model_, "general.architecture");
  identity_.n_layer = static_cast<uint32_t>(llama_model_n_layer(model_));
  identity_.n_head_kv = static_cast<uint32_t>(llama_model_n_head_kv(model_));
  const std::string key_length =
      meta_string(model_, (identity_.architecture + ".attention.key_length").c_str());
  identity_.head_dim =
      key_length.empty()
          ? static_cast<uint32_t>(llama_model_n_embd(model_) / llama_model_n_head(model_))
          : static_cast<uint32_t>(std::stoul(key_length));
  const llama_rope_type rope = llama_model_rope_type(model_);
  cell_ext_ = rope == LLAMA_ROPE_TYPE_MROPE || rope == LLAMA_ROPE_TYPE_IMROPE;
}

Model::~Model() {
  llama_model_free(model_);
}

const detail::Layer0Projector& Model::layer0() const {
  std::call_once(layer0_once_,
                 [this] { layer0_ = std::make_unique<detail::Layer0Projector>(*this); });
  return *layer0_;
}

int32_t Model::n_vocab() const {
  return llama_vocab_n_tokens(llama_model_get_vocab(model_));
}

int32_t Model::n_ctx_train() const {
  return llama_model_n_ctx_train(model_);
}

std::vector<int32_t> Model::tokenize(const std::string& text, bool add_bos) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  const int32_t len = static_cast<int32_t>(text.size());
  int32_t n = -llama_tokenize(vocab, text.data(), len, nullptr, 0, add_bos, false);
  std::vector<int32_t> tokens(static_cast<size_t>(std::max(n, 0)));
  n = llama_tokenize(vocab, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()),
                     add_bos, false);
  if (n < 0) throw Error(ErrorCode::invalid_argument, "llama: tokenization failed");
  tokens.resize(static_cast<size_t>(n));
  return tokens;
}

std::string Model::detokenize(std::span<const int32_t> tokens) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::string text(tokens.size() * 16 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n = llama_detokenize(vocab, tokens.data(), static_cast<int32_t>(tokens.size()),
                                       text.data(), static_cast<int32_t>(text.size()), true, false);
    if (n >= 0) {
      text.resize(static_cast<size_t>(n));
      return text;
    }
    text.resize(static_cast<size_t>(-n));
  }
  throw Error(ErrorCode::invalid_argument, "llama: detokenization failed");
}

Context::Context(const Model& model, const ContextSettings& settings)
    : model_(model), settings_(settings) {
  llama_context_params p = llama_context_default_params();
  p.n_ctx = settings.n_ctx;
  p.n_batch = settings.n_ctx;
  p.n_ubatch = settings.n_ctx;
  p.n_seq_max = 1;
  p.n_threads = settings.n_threads;
  p.n_threads_batch = settings.n_threads;
  p.flash_attn_type =
      settings.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = static_cast<ggml_type>(settings.type_k);
  p.type_v = static_cast<ggml_type>(settings.type_v);
  p.no_perf = true;
  ctx_ = llama_init_from_model(model.get(), p);
  if (ctx_ == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                "llama: llama.cpp refused a context with K " + type_name(settings.type_k) + ", V " +
                    type_name(settings.type_v) + ", flash attention " +
                    (settings.flash_attn ? "on" : "off") + " for this model (head_dim " +
                    std::to_string(model.identity().head_dim) + ")");
  }
}

Context::~Context() {
  llama_free(ctx_);
}

void Context::clear() {
  llama_memory_clear(llama_get_memory(ctx_), true);
}

std::vector<float> Context::decode(std::span<const int32_t> tokens, int32_t first_pos,
                                   bool all_logits) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n == 0) return {};
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; ++i) {
    batch.token[i] = tokens[static_cast<size_t>(i)];
    batch.pos[i] = first_pos + i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = all_logits || i == n - 1;
  }
  batch.n_tokens = n;
  g_model_evaluations.fetch_add(1);
  const int32_t rc = llama_decode(ctx_, batch);
  llama_batch_free(batch);
  if (rc != 0) {
    throw Error(ErrorCode::invalid_argument, "llama: llama_decode failed (" + std::to_string(rc) +
                                                 ") for " + std::to_string(n) + " tokens");
  }
  const size_t n_vocab = static_cast<size_t>(model_.n_vocab());
  const int32_t n_out = all_logits ? n : 1;
  std::vector<float> logits(static_cast<size_t>(n_out) * n_vocab);
  for (int32_t i = 0; i < n_out; ++i) {
    const float* row = llama_get_logits_ith(ctx_, all_logits ? i : n - 1);
    std::copy(row, row + n_vocab, logits.begin() + static_cast<ptrdiff_t>(i * n_vocab));
  }
  return logits;
}

namespace {

// A context made elsewhere must run a model of model's shape (its weights are not compared).
void check_context_model(llama_context* ctx, const Model& model) {
  if (ctx == nullptr) throw Error(ErrorCode::invalid_argument, "llama: the context is NULL");
  const llama_model* have = llama_get_model(ctx);
  const auto shape = [](const llama_model* m) {
    return std::to_string(llama_model_n_layer(m)) + " layers, " +
           std::to_string(llama_model_n_head_kv(m)) + " KV heads, n_embd " +
           std::to_string(llama_model_n_embd(m));
  };
  if (have != model.get() && shape(have) != shape(model.get())) {
    throw Error(ErrorCode::invalid_argument, "llama: the context's model (" + shape(have) +
                                                 ") is not the given model (" + shape(model.get()) +
                                                 ")");
  }
}

}  // namespace

KvSnapshot capture_seq_state(llama_context* ctx, const Model& model,
                             std::span<const int32_t> tokens, int32_t seq_id) {
  check_context_model(ctx, model);
  const size_t size = llama_state_seq_get_size(ctx, seq_id);
  std::vector<uint8_t> bytes(size);
  const size_t written = llama_state_seq_get_data(ctx, bytes.data(), bytes.size(), seq_id);
  if (written != size) {
    throw Error(ErrorCode::io_error, "llama: llama_state_seq_get_data wrote " +
                                         std::to_string(written) + " of " + std::to_string(size) +
                                         " bytes");
  }
  ParseOptions options;
  options.cell_ext = model.cell_ext();
  KvSnapshot s = parse_seq_state(bytes, options);
  s.model = model.identity();
  if (tokens.size() != s.n_cells()) {
    throw Error(ErrorCode::invalid_argument, "llama: " + std::to_string(tokens.size()) +
                                                 " tokens given for a state of " +
                                                 std::to_string(s.n_cells()) + " cells");
  }
  s.tokens.assign(tokens.begin(), tokens.end());
  return s;
}

KvSnapshot capture_seq_state(Context& ctx, std::span<const int32_t> tokens, int32_t seq_id) {
  return capture_seq_state(ctx.get(), ctx.model(), tokens, seq_id);
}

namespace {

// The checks every restore makes: the snapshot's model and kind.
void check_restorable(const Model& model, const KvSnapshot& snapshot) {
  const ModelIdentity& want = model.identity();
  const ModelIdentity& have = snapshot.model;
  if (!(have == want)) {
    throw Error(ErrorCode::invalid_argument,
                "llama: refusing to restore a KV cache of model '" + have.architecture + "' (" +
                    std::to_string(have.n_layer) + " layers, " + std::to_string(have.n_head_kv) +
                    " KV heads x " + std::to_string(have.head_dim) + ", GGUF hash " +
                    std::to_string(have.gguf_header_hash) + ") into model '" + want.architecture +
                    "' (" + std::to_string(want.n_layer) + " layers, " +
                    std::to_string(want.n_head_kv) + " KV heads x " +
                    std::to_string(want.head_dim) + ", GGUF hash " +
                    std::to_string(want.gguf_header_hash) + ")");
  }
  if (snapshot.kind != StateKind::sequence) {
    throw Error(ErrorCode::invalid_argument, "llama: restore_seq_state needs a sequence state");
  }
}

}  // namespace

void restore_seq_state(llama_context* ctx, const Model& model, const KvSnapshot& snapshot,
                       int32_t seq_id) {
  check_context_model(ctx, model);
  check_restorable(model, snapshot);
  const KvStream& stream = snapshot.data_stream();
  if (stream.cells.size() > llama_n_ctx(ctx)) {
    throw Error(ErrorCode::invalid_argument,
                "llama: refusing to restore " + std::to_string(stream.cells.size()) +
                    " cells into a context of n_ctx " + std::to_string(llama_n_ctx(ctx)));
  }
  const std::vector<uint8_t> bytes = build_state(snapshot);
  const size_t read = llama_state_seq_set_data(ctx, bytes.data(), bytes.size(), seq_id);
  if (read != bytes.size()) {
    throw Error(ErrorCode::corrupt_input,
                "llama: llama_state_seq_set_data rejected the rebuilt "
                "state (" +
                    std::to_string(read) + " of " + std::to_string(bytes.size()) + " bytes read)");
  }
}

void restore_seq_state(Context& ctx, const KvSnapshot& snapshot, int32_t seq_id) {
  check_restorable(ctx.model(), snapshot);
  const KvStream& stream = snapshot.data_stream();
  const ContextSettings& cs = ctx.settings();
  if (stream.v_trans == cs.flash_attn) {
    throw Error(ErrorCode::invalid_argument,
                std::string("llama: refusing to restore: the KV cache was captured with flash "
                            "attention ") +
                    (stream.v_trans ? "off (V transposed)" : "on (V row-major)") +
                    ", this context has it " + (cs.flash_attn ? "on" : "off"));
  }
  for (const KvLayer& layer : stream.layers) {
    if (layer.k_type != cs.type_k || layer.v_type != cs.type_v) {
      throw Error(ErrorCode::invalid_argument,
                  "llama: refusing to restore: the KV cache holds K " + type_name(layer.k_type) +
                      ", V " + type_name(layer.v_type) + "; this context stores K " +
                      type_name(cs.type_k) + ", V " + type_name(cs.type_v));
    }
  }
  restore_seq_state(ctx.get(), ctx.model(), snapshot, seq_id);
}

}  // namespace cachegen::llama
