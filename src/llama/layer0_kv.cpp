// Layer 0's K/V from the GGUF weights with ggml's CPU ops (contract: layer0_kv.h).
#include "llama/layer0_kv.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <gguf.h>

#include <algorithm>
#include <fstream>
#include <unordered_map>

#include "cachegen/error.h"
#include "cachegen/runtime.h"

namespace cachegen::llama::detail {
namespace {

[[noreturn]] void unsupported(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "llama layer 0: " + why);
}

struct GgufFile {
  gguf_context* g = nullptr;
  ggml_context* meta = nullptr;  // tensor shapes (no data)
  explicit GgufFile(const std::string& path) {
    gguf_init_params p{};
    p.no_alloc = true;
    p.ctx = &meta;
    g = gguf_init_from_file(path.c_str(), p);
    if (g == nullptr) {
      throw Error(ErrorCode::corrupt_input, "llama layer 0: '" + path + "' is not a GGUF file");
    }
  }
  ~GgufFile() {
    gguf_free(g);
    ggml_free(meta);
  }
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  const ggml_tensor* tensor(const std::string& name) const {
    return ggml_get_tensor(meta, name.c_str());
  }
  // Absolute file offset of a tensor's data.
  size_t offset(const std::string& name) const {
    const int64_t id = gguf_find_tensor(g, name.c_str());
    return gguf_get_data_offset(g) + gguf_get_tensor_offset(g, id);
  }
};

// The reason layer 0 of this GGUF is not the plain llama form, or "" when it is.
std::string unsupported_reason(const GgufFile& f, const ModelIdentity& id) {
  if (id.architecture != "llama") {
    return "architecture '" + id.architecture + "' (only 'llama' layer 0 is computed directly)";
  }
  for (const char* needed : {"token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_k.weight",
                             "blk.0.attn_v.weight"}) {
    if (f.tensor(needed) == nullptr) return std::string("no tensor ") + needed;
  }
  for (const char* extra : {"blk.0.attn_qkv.weight", "blk.0.attn_k_norm.weight",
                            "blk.0.attn_k.scale", "blk.0.attn_v.scale", "rope_freqs.weight"}) {
    if (f.tensor(extra) != nullptr) return std::string("tensor ") + extra + " is not handled";
  }
  const std::string eps_key = id.architecture + ".attention.layer_norm_rms_epsilon";
  const int64_t k = gguf_find_key(f.g, eps_key.c_str());
  if (k < 0 || gguf_get_kv_type(f.g, k) != GGUF_TYPE_FLOAT32) return "no " + eps_key;
  return "";
}

}  // namespace

struct Layer0Projector::Impl {
  std::string path;
  size_t n_embd = 0, k_width = 0, v_width = 0, head_dim = 0, n_heads = 0;
  int64_t n_vocab = 0;
  float eps = 0;
  ggml_type embd_type = GGML_TYPE_F32;
  size_t embd_offset = 0, embd_row_bytes = 0;
  ggml_context* weights = nullptr;
  ggml_tensor *attn_norm = nullptr, *wk = nullptr, *wv = nullptr, *bk = nullptr, *bv = nullptr;
  ~Impl() { ggml_free(weights); }
};

bool Layer0Projector::supported(const Model& model, std::string* why) {
  const GgufFile f(model.path());
  const std::string reason = unsupported_reason(f, model.identity());
  if (why != nullptr) *why = reason;
  return reason.empty();
}

Layer0Projector::Layer0Projector(const Model& model) : impl_(std::make_unique<Impl>()) {
  ggml_cpu_init();
  Impl& m = *impl_;
  m.path = model.path();
  const GgufFile f(m.path);
  if (const std::string why = unsupported_reason(f, model.identity()); !why.empty()) {
    unsupported(why);
  }
  const ModelIdentity& id = model.identity();
  m.eps = gguf_get_val_f32(
      f.g, gguf_find_key(f.g, (id.architecture + ".attention.layer_norm_rms_epsilon").c_str()));
  m.head_dim = id.head_dim;
  m.n_heads = id.n_head_kv;
  const ggml_tensor* embd = f.tensor("token_embd.weight");
  m.n_embd = static_cast<size_t>(embd->ne[0]);
  m.n_vocab = embd->ne[1];
  m.embd_type = embd->type;
  m.embd_offset = f.offset("token_embd.weight");
  m.embd_row_bytes = ggml_row_size(embd->type, embd->ne[0]);

  const char* names[] = {"blk.0.attn_norm.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                         "blk.0.attn_k.bias", "blk.0.attn_v.bias"};
  size_t bytes = 0;
  for (const char* n : names) {
    if (const ggml_tensor* t = f.tensor(n)) bytes += ggml_nbytes(t) + ggml_tensor_overhead() + 64;
  }
  ggml_init_params p{};
  p.mem_size = bytes + 1024;
  m.weights = ggml_init(p);
  if (m.weights == nullptr) throw Error(ErrorCode::io_error, "llama layer 0: out of memory");
  std::ifstream in(m.path, std::ios::binary);
  ggml_tensor** slots[] = {&m.attn_norm, &m.wk, &m.wv, &m.bk, &m.bv};
  for (size_t i = 0; i < 5; ++i) {
    const ggml_tensor* t = f.tensor(names[i]);
    if (t == nullptr) continue;
    ggml_tensor* dst = ggml_new_tensor(m.weights, t->type, ggml_n_dims(t), t->ne);
    in.seekg(static_cast<std::streamoff>(f.offset(names[i])));
    if (!in.read(static_cast<char*>(dst->data), static_cast<std::streamsize>(ggml_nbytes(t)))) {
      throw Error(ErrorCode::io_error,
                  "llama layer 0: cannot read tensor " + std::string(names[i]) + " of " + m.path);
    }
    *slots[i] = dst;
  }
  m.k_width = static_cast<size_t>(m.wk->ne[1]);
  m.v_width = static_cast<size_t>(m.wv->ne[1]);
  const auto is_vec = [&](const ggml_tensor* t, size_t n) {
    return t == nullptr ||
           (t->type == GGML_TYPE_F32 && ggml_nelements(t) == static_cast<int64_t>(n));
  };
  if (static_cast<size_t>(m.attn_norm->ne[0]) != m.n_embd ||
      static_cast<size_t>(m.wk->ne[0]) != m.n_embd ||
      static_cast<size_t>(m.wv->ne[0]) != m.n_embd || !is_vec(m.attn_norm, m.n_embd) ||
      !is_vec(m.bk, m.k_width) || !is_vec(m.bv, m.v_width) || m.k_width != m.n_heads * m.head_dim) {
    unsupported("layer 0 tensors of unexpected shape or type in " + m.path);
  }
}

Layer0Projector::~Layer0Projector() = default;

size_t Layer0Projector::k_width() const {
  return impl_->k_width;
}
size_t Layer0Projector::v_width() const {
  return impl_->v_width;
}

void Layer0Projector::compute(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                              const RopeParams& rope, std::vector<float>& k,
                              std::vector<float>& v) const {
  const Impl& m = *impl_;
  if (positions.size() != tokens.size()) {
    throw Error(ErrorCode::invalid_argument, "llama layer 0: one position per token needed");
  }
  // Layer 0 of a token does not depend on its position before RoPE: one row per distinct token.
  std::vector<int32_t> distinct(tokens.begin(), tokens.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int32_t t : distinct) {
    if (t < 0 || t >= m.n_vocab) {
      throw Error(ErrorCode::corrupt_input, "llama layer 0: token id " + std::to_string(t) +
                                                " is outside the model's vocabulary of " +
                                                std::to_string(m.n_vocab));
    }
  }
  std::vector<float> table_k(distinct.size() * m.k_width), table_v(distinct.size() * m.v_width);
  std::ifstream in(m.path, std::ios::binary);
  constexpr size_t kBatch = 256;  // bounds the scratch context
  std::vector<int32_t> rows_ids(kBatch);
  for (size_t i = 0; i < kBatch; ++i) rows_ids[i] = static_cast<int32_t>(i);
  // Threads only for matmuls big enough to repay ggml's spinning barriers (2^22 MACs each).
  const size_t macs = std::min(kBatch, distinct.size()) * m.n_embd * (m.k_width + m.v_width);
  const int n_threads =
      static_cast<int>(std::clamp<size_t>(macs >> 22, 1, std::max<size_t>(1, thread_count())));
  for (size_t first = 0; first < distinct.size(); first += kBatch) {
    const size_t b = std::min(kBatch, distinct.size() - first);
    const size_t act = b * (m.n_embd * 4 + m.k_width * 2 + m.v_width * 2) * sizeof(float);
    ggml_init_params p{};
    p.mem_size = b * m.embd_row_bytes + act + b * m.n_embd * sizeof(float) + ggml_graph_overhead() +
                 16 * ggml_tensor_overhead() + (size_t{1} << 20);
    ggml_context* ctx = ggml_init(p);
    if (ctx == nullptr) throw Error(ErrorCode::io_error, "llama layer 0: out of memory");
    struct Free {
      ggml_context* c;
      ~Free() { ggml_free(c); }
    } guard{ctx};
    ggml_tensor* rows = ggml_new_tensor_2d(ctx, m.embd_type, static_cast<int64_t>(m.n_embd),
                                           static_cast<int64_t>(b));
    for (size_t i = 0; i < b; ++i) {
      in.seekg(static_cast<std::streamoff>(
          m.embd_offset + static_cast<size_t>(distinct[first + i]) * m.embd_row_bytes));
      if (!in.read(static_cast<char*>(rows->data) + i * m.embd_row_bytes,
                   static_cast<std::streamsize>(m.embd_row_bytes))) {
        throw Error(ErrorCode::io_error, "llama layer 0: cannot read token_embd of " + m.path);
      }
    }
    ggml_tensor* ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(b));
    std::copy_n(rows_ids.begin(), b, static_cast<int32_t*>(ids->data));
    // llama.cpp's graph for layer 0 (build_inp_embd, build_norm RMS, build_qkv).
    ggml_tensor* x = ggml_get_rows(ctx, rows, ids);
    ggml_tensor* h = ggml_mul(ctx, ggml_rms_norm(ctx, x, m.eps), m.attn_norm);
    ggml_tensor* kc = ggml_mul_mat(ctx, m.wk, h);
    if (m.bk != nullptr) kc = ggml_add(ctx, kc, m.bk);
    ggml_tensor* vc = ggml_mul_mat(ctx, m.wv, h);
    if (m.bv != nullptr) vc = ggml_add(ctx, vc, m.bv);
    ggml_cgraph* gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, kc);
    ggml_build_forward_expand(gf, vc);
    if (ggml_graph_compute_with_ctx(ctx, gf, n_threads) != GGML_STATUS_SUCCESS) {
      throw Error(ErrorCode::io_error, "llama layer 0: ggml graph computation failed");
    }
    std::copy_n(static_cast<const float*>(kc->data), b * m.k_width,
                table_k.begin() + static_cast<ptrdiff_t>(first * m.k_width));
    std::copy_n(static_cast<const float*>(vc->data), b * m.v_width,
                table_v.begin() + static_cast<ptrdiff_t>(first * m.v_width));
  }
  const size_t n = tokens.size();
  k.resize(n * m.k_width);
  v.resize(n * m.v_width);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = static_cast<size_t>(
        std::lower_bound(distinct.begin(), distinct.end(), tokens[i]) - distinct.begin());
    std::copy_n(table_k.begin() + static_cast<ptrdiff_t>(r * m.k_width), m.k_width,
                k.begin() + static_cast<ptrdiff_t>(i * m.k_width));
    std::copy_n(table_v.begin() + static_cast<ptrdiff_t>(r * m.v_width), m.v_width,
                v.begin() + static_cast<ptrdiff_t>(i * m.v_width));
  }
  rope_rows(k, n, m.n_heads, m.head_dim, positions, rope, false);
}

}  // namespace cachegen::llama::detail
