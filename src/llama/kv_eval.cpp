// `cachegen eval`: rate–quality table of KV-cache compression on a real model.
//
// Per window of prefix + n_continue + 1 tokens: prefill the prefix, capture its KV (exact), then
// for every method rebuild the state with that method's reconstruction of K and V, restore it
// into the same context, teacher-force the n_continue following tokens and compare their
// next-token distributions with those of the exact (restored, unmodified) state.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <llama.h>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/quant.h"

namespace cachegen::llama {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

enum class MethodKind { exact, reference, codec, ggml_type };

struct Method {
  std::string name;
  MethodKind kind = MethodKind::exact;
  std::vector<int> k_bits, v_bits;  // per layer (reference / codec)
  int32_t ggml_type = kTypeF16;     // ggml_type methods
  bool estimate_only = false;       // reference row priced by the reference's estimate
};

struct Accum {
  double kl = 0, nll = 0, nll_exact = 0;
  size_t top1 = 0, n = 0;
  double k_bits_sum = 0, v_bits_sum = 0, est_bits_sum = 0;  // bits over all windows
  double elements = 0;                                      // K+V elements over all windows
  double encode_ms = 0, decode_ms = 0;
  bool emulated = false;
};

std::vector<int> uniform(size_t n, int bits) {
  return std::vector<int>(n, bits);
}

std::string schedule_name(const std::vector<int>& bits) {
  std::string s;
  for (int b : bits) s += std::to_string(b);
  return s;
}

std::vector<Method> default_methods(size_t n_layer) {
  std::vector<Method> m;
  m.push_back({"fp16 (restored, lossless)", MethodKind::exact, {}, {}, kTypeF16, false});
  for (int b : {8, 6, 5, 4, 3, 2}) {
    m.push_back({"ref-" + std::to_string(b) + "b", MethodKind::reference, uniform(n_layer, b),
                 uniform(n_layer, b), kTypeF16, false});
  }
  m.push_back({"ref-4b (reference estimate)", MethodKind::reference, uniform(n_layer, 4),
               uniform(n_layer, 4), kTypeF16, true});
  for (int b : {8, 6, 5, 4, 3}) {
    m.push_back({"codec-" + std::to_string(b) + "b", MethodKind::codec, uniform(n_layer, b),
                 uniform(n_layer, b), kTypeF16, false});
  }
  // K carries almost all of the damage, so K/V splits give V fewer bits.
  const std::vector<std::pair<int, int>> splits = {{2, 8}, {8, 2}, {6, 4}, {6, 3}, {5, 4},
                                                   {5, 3}, {5, 2}, {4, 3}, {4, 2}, {3, 2},
                                                   {5, 1}, {4, 1}, {3, 1}};
  for (auto [kb, vb] : splits) {
    m.push_back({"codec-K" + std::to_string(kb) + "V" + std::to_string(vb), MethodKind::codec,
                 uniform(n_layer, kb), uniform(n_layer, vb), kTypeF16, false});
  }
  const int nl = static_cast<int>(n_layer);
  for (auto [kb, vb] : std::vector<std::pair<int, int>>{{6, 4}, {6, 3}, {5, 3}}) {
    Method x{
        "",   MethodKind::codec, layer_group_bits(nl, kb, 3), layer_group_bits(nl, vb, 3), kTypeF16,
        false};
    x.name = "codec-K" + schedule_name(x.k_bits) + "-V" + schedule_name(x.v_bits);
    m.push_back(std::move(x));
  }
  m.push_back({"llama.cpp q8_0", MethodKind::ggml_type, {}, {}, kTypeQ8_0, false});
  m.push_back({"llama.cpp q4_0", MethodKind::ggml_type, {}, {}, kTypeQ4_0, false});
  return m;
}

// Bits per element of llama.cpp's block types (bytes per block of 32 elements * 8 / 32).
double ggml_type_bits(int32_t type) {
  return type == kTypeQ8_0 ? 8.5 : type == kTypeQ4_0 ? 4.5 : 16;
}

// Replaces one [n_rows, n_embd] matrix by a method's reconstruction; returns its coded bits.
double compress_matrix(const Method& m, int bits, size_t group, std::vector<float>& x,
                       size_t n_rows, size_t n_embd, Accum& acc) {
  std::vector<Half> rec;
  double coded_bits = 0;
  auto t0 = Clock::now();
  if (m.kind == MethodKind::reference) {
    const CodeStream s = quantize_to_codes(std::span<const float>(x), n_rows, n_embd, bits, group);
    acc.encode_ms += ms_since(t0);
    coded_bits = 8.0 * static_cast<double>(fixed_width_bytes(s));
    acc.est_bits_sum += 8.0 * static_cast<double>(entropy_coded_bytes(s));
    t0 = Clock::now();
    rec = dequant_codes(s);
    acc.decode_ms += ms_since(t0);
  } else {
    const std::vector<uint8_t> bytes =
        encode_values(std::span<const float>(x), n_rows, n_embd, bits, group);
    acc.encode_ms += ms_since(t0);
    coded_bits = 8.0 * static_cast<double>(bytes.size());
    t0 = Clock::now();
    rec = decode_to_half(bytes);
    acc.decode_ms += ms_since(t0);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = half_to_float(rec[i]);
  return coded_bits;
}

// The method's reconstruction of every layer's K and V in place.
void apply_method(const Method& m, size_t group, KvSnapshot& s, Accum& acc) {
  KvStream& stream = s.data_stream();
  const size_t n_rows = stream.cells.size();
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    KvLayer& layer = stream.layers[il];
    std::vector<float> k = layer_k_float(layer), v = layer_v_float(layer);
    const size_t k_embd = k_row_elements(layer), v_embd = v_row_elements(layer);
    acc.elements += static_cast<double>(k.size() + v.size());
    if (m.kind == MethodKind::ggml_type) {
      // Emulation: llama.cpp's own row quantizer and dequantizer on the captured rows.
      KvLayer q = layer;
      q.k_type = q.v_type = m.ggml_type;
      q.k_row_bytes = q.k.size() == 0 ? 0 : k_embd / 32 * (m.ggml_type == kTypeQ8_0 ? 34 : 18);
      q.v_row_bytes = v_embd / 32 * (m.ggml_type == kTypeQ8_0 ? 34 : 18);
      if (k_embd % 32 != 0 || v_embd % 32 != 0) {
        throw Error(ErrorCode::invalid_argument, "eval: rows of " + std::to_string(k_embd) +
                                                     " elements cannot be cut in blocks of 32");
      }
      q.k.assign(n_rows * q.k_row_bytes, 0);
      q.v.assign(n_rows * q.v_row_bytes, 0);
      auto t0 = Clock::now();
      set_layer_k_float(q, k);
      set_layer_v_float(q, v);
      acc.encode_ms += ms_since(t0);
      t0 = Clock::now();
      k = layer_k_float(q);
      v = layer_v_float(q);
      acc.decode_ms += ms_since(t0);
      acc.k_bits_sum += ggml_type_bits(m.ggml_type) * static_cast<double>(k.size());
      acc.v_bits_sum += ggml_type_bits(m.ggml_type) * static_cast<double>(v.size());
    } else if (m.kind == MethodKind::exact) {
      acc.k_bits_sum += 16.0 * static_cast<double>(k.size());
      acc.v_bits_sum += 16.0 * static_cast<double>(v.size());
      continue;
    } else {
      acc.k_bits_sum += compress_matrix(m, m.k_bits[il], group, k, n_rows, k_embd, acc);
      acc.v_bits_sum += compress_matrix(m, m.v_bits[il], group, v, n_rows, v_embd, acc);
    }
    set_layer_k_float(layer, k);
    set_layer_v_float(layer, v);
  }
}

std::vector<double> log_softmax(const float* logits, size_t n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double lse = static_cast<double>(mx) + std::log(sum);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

void score(const std::vector<float>& exact, const std::vector<float>& got, size_t n_vocab,
           std::span<const int32_t> targets, Accum& acc) {
  for (size_t t = 0; t < targets.size(); ++t) {
    const std::vector<double> p = log_softmax(&exact[t * n_vocab], n_vocab);
    const std::vector<double> q = log_softmax(&got[t * n_vocab], n_vocab);
    double kl = 0;
    for (size_t i = 0; i < n_vocab; ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
    acc.kl += std::max(kl, 0.0);
    const auto argmax = [&](const std::vector<double>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    acc.top1 += argmax(p) == argmax(q) ? 1 : 0;
    acc.nll -= q[static_cast<size_t>(targets[t])];
    acc.nll_exact -= p[static_cast<size_t>(targets[t])];
    acc.n += 1;
  }
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::not_found, "eval: text file '" + path + "' not found");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<EvalRow> evaluate_kv_quality(const EvalOptions& o,
                                         const std::function<void(const std::string&)>& progress) {
  if (o.n_contexts < 1 || o.prefix < 1 || o.n_continue < 1) {
    throw Error(ErrorCode::invalid_argument, "eval: --contexts, --prefix, --continue must be >= 1");
  }
  const Model model(o.model_path);
  const std::vector<int32_t> text = model.tokenize(read_text(o.text_path), false);
  const size_t window = static_cast<size_t>(o.prefix + o.n_continue + 1);
  const size_t need = static_cast<size_t>(o.n_contexts) * (window - 1);
  if (text.size() < need) {
    throw Error(ErrorCode::invalid_argument, "eval: the text has " + std::to_string(text.size()) +
                                                 " tokens, " + std::to_string(need) + " needed");
  }
  const int32_t bos = llama_vocab_bos(llama_model_get_vocab(model.get()));
  ContextSettings cs;
  cs.n_ctx = static_cast<uint32_t>((window + 255) / 256 * 256);
  cs.flash_attn = o.flash_attn;
  cs.n_threads = o.n_threads;
  Context ctx(model, cs);

  const size_t n_layer = model.identity().n_layer;
  const std::vector<Method> methods = default_methods(n_layer);
  std::vector<Accum> acc(methods.size());
  // llama.cpp's quantized KV types need flash attention and blocks that divide head_dim;
  // where it refuses, the row is emulated on the captured KV.
  std::vector<std::unique_ptr<Context>> native(methods.size());
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    if (methods[mi].kind != MethodKind::ggml_type) continue;
    ContextSettings q = cs;
    q.flash_attn = true;
    q.type_k = q.type_v = methods[mi].ggml_type;
    try {
      native[mi] = std::make_unique<Context>(model, q);
    } catch (const Error&) {
      acc[mi].emulated = true;
    }
  }

  const size_t n_vocab = static_cast<size_t>(model.n_vocab());
  for (int w = 0; w < o.n_contexts; ++w) {
    // Window: BOS + (window - 1) text tokens; the prefix includes BOS.
    std::vector<int32_t> tok{bos};
    const auto first = text.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(w) * (window - 1));
    tok.insert(tok.end(), first, first + static_cast<ptrdiff_t>(window - 1));
    const std::span<const int32_t> prefix(tok.data(), static_cast<size_t>(o.prefix));
    const std::span<const int32_t> cont(tok.data() + o.prefix, static_cast<size_t>(o.n_continue));
    const std::span<const int32_t> targets(tok.data() + o.prefix + 1,
                                           static_cast<size_t>(o.n_continue));
    ctx.clear();
    ctx.decode(prefix, 0, false);
    const KvSnapshot captured = capture_seq_state(ctx, prefix);
    ctx.clear();
    restore_seq_state(ctx, captured);
    const std::vector<float> exact = ctx.decode(cont, o.prefix, true);

    for (size_t mi = 0; mi < methods.size(); ++mi) {
      std::vector<float> got;
      if (native[mi]) {
        Context& q = *native[mi];
        q.clear();
        q.decode(prefix, 0, false);
        got = q.decode(cont, o.prefix, true);
        const double el = static_cast<double>(o.prefix) * n_layer * 2 * model.identity().n_head_kv *
                          model.identity().head_dim;
        acc[mi].elements += el;
        acc[mi].k_bits_sum += ggml_type_bits(methods[mi].ggml_type) * el / 2;
        acc[mi].v_bits_sum += ggml_type_bits(methods[mi].ggml_type) * el / 2;
      } else {
        KvSnapshot s = captured;
        apply_method(methods[mi], o.group_size, s, acc[mi]);
        ctx.clear();
        restore_seq_state(ctx, s);
        got = ctx.decode(cont, o.prefix, true);
      }
      score(exact, got, n_vocab, targets, acc[mi]);
    }
    if (progress) progress("window " + std::to_string(w + 1) + "/" + std::to_string(o.n_contexts));
  }

  std::vector<EvalRow> rows;
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    const Accum& a = acc[mi];
    EvalRow r;
    r.method = methods[mi].name + (a.emulated ? " (emulated)" : "");
    r.emulated = a.emulated;
    const double half = a.elements / 2;  // K and V hold the same number of elements here
    r.k_bits = a.k_bits_sum / half;
    r.v_bits = a.v_bits_sum / half;
    r.estimate_bits = a.est_bits_sum / a.elements;
    r.bits_per_element =
        methods[mi].estimate_only ? r.estimate_bits : (a.k_bits_sum + a.v_bits_sum) / a.elements;
    r.ratio_vs_fp16 = 16.0 / r.bits_per_element;
    const double n = static_cast<double>(a.n);
    r.kl = a.kl / n;
    r.top1 = static_cast<double>(a.top1) / n;
    r.ppl = std::exp(a.nll / n);
    r.ppl_exact = std::exp(a.nll_exact / n);
    r.encode_ms = a.encode_ms;
    r.decode_ms = a.decode_ms;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace cachegen::llama
