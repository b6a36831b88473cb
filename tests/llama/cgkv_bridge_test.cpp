// Captured llama.cpp state -> .cgkv -> state: lossless gives identical bytes and logits,
// quantized gives a small KL and keeps generating, another model is refused, hostile blobs
// give clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cachegen/error.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

using test::make_context;

constexpr size_t kPrefix = 64;
constexpr size_t kContinue = 16;

struct Captured {
  std::unique_ptr<Context> ctx;
  KvSnapshot snapshot;
  std::vector<uint8_t> raw;        // llama_state_seq_get_data bytes
  std::vector<int32_t> tokens;     // prefix + continuation
  std::vector<float> next_logits;  // exact logits of the continuation (all positions)
};

Captured capture(const Model& model, bool flash, int32_t kv_type = kTypeF16) {
  Captured c;
  c.tokens = test::story_tokens(model, kPrefix + kContinue);
  const std::span<const int32_t> prefix(c.tokens.data(), kPrefix);
  c.ctx = make_context(model, flash, kv_type);
  c.ctx->decode(prefix, 0, false);
  c.raw = test::raw_seq_state(*c.ctx);
  c.snapshot = capture_seq_state(*c.ctx, prefix);
  c.next_logits = c.ctx->decode(std::span(c.tokens).subspan(kPrefix), kPrefix, true);
  return c;
}

// Restores `s` into a fresh context and returns the continuation's logits.
std::vector<float> restored_logits(const Model& model, const Captured& c, const KvSnapshot& s,
                                   bool flash, int32_t kv_type = kTypeF16) {
  auto ctx = make_context(model, flash, kv_type);
  restore_seq_state(*ctx, s);
  return ctx->decode(std::span(c.tokens).subspan(kPrefix), kPrefix, true);
}

KvSnapshot round_trip(const KvSnapshot& s, const SnapshotEncoding& level) {
  return cgkv_to_snapshot(CgkvReader::from_bytes(snapshot_to_cgkv(s, s.model, level)));
}

// The same file with blob `kind` replaced by `bytes` (removed when bytes is nullopt).
std::vector<uint8_t> with_blob(const std::vector<uint8_t>& file, BlobKind kind,
                               const std::optional<std::vector<uint8_t>>& bytes) {
  const CgkvReader r = CgkvReader::from_bytes(file);
  const CgkvInfo& info = r.info();
  std::vector<CgkvBlob> blobs;
  for (const CgkvBlobInfo& b : info.blobs) {
    if (b.kind == static_cast<uint32_t>(kind)) continue;
    blobs.push_back({b.kind, *r.read_blob(b.kind)});
  }
  if (bytes) blobs.push_back({static_cast<uint32_t>(kind), *bytes});
  ModelShape shape;
  shape.n_layers = info.n_layers;
  shape.n_kv_heads = info.n_kv_heads;
  shape.head_dim = info.head_dim;
  return write_cgkv_lossless(shape, r.read_tokens(0, info.n_tokens), info.n_tokens,
                             info.chunk_tokens, blobs);
}

std::vector<uint8_t> text_bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

// A metadata blob naming `id`, written by hand as a forger would.
std::vector<uint8_t> metadata_json(const ModelIdentity& id) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(id.gguf_header_hash));
  return text_bytes(R"({"format":"cachegen.llama","version":1,"architecture":")" + id.architecture +
                    R"(","n_layer":)" + std::to_string(id.n_layer) + R"(,"n_head_kv":)" +
                    std::to_string(id.n_head_kv) + R"(,"head_dim":)" + std::to_string(id.head_dim) +
                    R"(,"gguf_header_hash":")" + hash + R"("})");
}

class CgkvBridge : public ::testing::TestWithParam<bool> {};

TEST_P(CgkvBridge, LosslessRebuildsIdenticalStateAndLogits) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const Captured c = capture(*model, flash);
  const std::vector<uint8_t> file =
      snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::exact());
  const CgkvReader reader = CgkvReader::from_bytes(file);
  EXPECT_EQ(reader.info().codec, ContainerCodec::lossless_fp16);
  EXPECT_EQ(reader.info().n_tokens, kPrefix);
  EXPECT_EQ(cgkv_model_identity(reader), model->identity());
  const KvSnapshot r = cgkv_to_snapshot(reader);
  EXPECT_EQ(r.model, model->identity());
  EXPECT_EQ(r.tokens, c.snapshot.tokens);
  EXPECT_EQ(build_state(r), c.raw);  // byte-identical state
  EXPECT_EQ(restored_logits(*model, c, r, flash), c.next_logits);
}

TEST_P(CgkvBridge, QuantizedRestoresWithSmallKlAndGenerates) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const Captured c = capture(*model, flash);
  const size_t n_vocab = static_cast<size_t>(model->n_vocab());
  const size_t lossless_bytes =
      snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::exact()).size();
  for (const int bits : {6, 4}) {
    const std::vector<uint8_t> file =
        snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::bits(bits));
    EXPECT_LT(file.size(), lossless_bytes) << bits;
    const KvSnapshot r = cgkv_to_snapshot(CgkvReader::from_bytes(file));
    EXPECT_EQ(build_state(r).size(), c.raw.size());
    const double kl = test::mean_kl(c.next_logits, restored_logits(*model, c, r, flash), n_vocab);
    EXPECT_GT(kl, 0.0) << bits;
    EXPECT_LT(kl, bits == 6 ? 5e-3 : 5e-2) << bits;
  }
  // The restored context keeps generating past the restored prefix.
  auto ctx = make_context(*model, flash);
  restore_seq_state(*ctx, round_trip(c.snapshot, SnapshotEncoding::bits(4)));
  int32_t tok = c.tokens[kPrefix];
  for (int32_t pos = kPrefix; pos < static_cast<int32_t>(kPrefix) + 8; ++pos) {
    const std::vector<float> logits = ctx->decode(std::span(&tok, 1), pos, false);
    ASSERT_EQ(logits.size(), n_vocab);
    tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, CgkvBridge, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "flash" : "noflash"; });

TEST(CgkvBridgeTypes, F32CacheQuantizesAndRefusesLossless) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Captured c = capture(*model, false, kTypeF32);
  try {
    snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::exact());
    FAIL() << "lossless f32 was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("f16 K/V only"), std::string::npos) << e.what();
  }
  const KvSnapshot r = round_trip(c.snapshot, SnapshotEncoding::bits(8));
  EXPECT_EQ(r.data_stream().layers[0].k_type, kTypeF32);
  const double kl = test::mean_kl(c.next_logits, restored_logits(*model, c, r, false, kTypeF32),
                                  static_cast<size_t>(model->n_vocab()));
  EXPECT_LT(kl, 1e-3);
}

void expect_error(const std::vector<uint8_t>& file, const std::string& why,
                  ErrorCode code = ErrorCode::corrupt_input) {
  try {
    cgkv_to_snapshot(CgkvReader::from_bytes(file));
    FAIL() << "accepted (" << why << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(CgkvBridgeRefusal, OtherModelOrContext) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Captured c = capture(*model, false);
  const std::vector<uint8_t> file =
      snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::exact());
  const auto refused = [&](const std::vector<uint8_t>& f, bool flash, const std::string& why) {
    const KvSnapshot s = cgkv_to_snapshot(CgkvReader::from_bytes(f));
    auto ctx = make_context(*model, flash);
    try {
      restore_seq_state(*ctx, s);
      FAIL() << "restore was not refused (" << why << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  // A forged metadata blob: same shape, another GGUF hash; then another layer count.
  ModelIdentity other = model->identity();
  other.gguf_header_hash ^= 1;
  refused(with_blob(file, BlobKind::metadata_json, metadata_json(other)), false,
          "refusing to restore a KV cache of model");
  other = model->identity();
  other.n_layer += 1;
  refused(snapshot_to_cgkv(c.snapshot, other, SnapshotEncoding::exact()), false,
          "refusing to restore a KV cache of model");
  // No metadata at all: an unknown model is refused too.
  refused(with_blob(file, BlobKind::metadata_json, std::nullopt), false,
          "refusing to restore a KV cache of model");
  // Incompatible context: the cache was captured with flash attention off.
  refused(file, true, "flash attention");
}

TEST(CgkvBridgeHostile, BlobsGiveClearErrors) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Captured c = capture(*model, false);
  const std::vector<uint8_t> file =
      snapshot_to_cgkv(c.snapshot, c.snapshot.model, SnapshotEncoding::exact());
  const std::vector<uint8_t> app =
      *CgkvReader::from_bytes(file).read_blob(static_cast<uint32_t>(BlobKind::app_state));

  expect_error(with_blob(file, BlobKind::app_state, std::nullopt), "no app_state blob");
  for (size_t n = 0; n < app.size(); ++n) {  // every truncation is an error, never a crash
    try {
      cgkv_to_snapshot(CgkvReader::from_bytes(with_blob(
          file, BlobKind::app_state, std::vector<uint8_t>(app.begin(), app.begin() + n))));
      ADD_FAILURE() << "truncated app_state of " << n << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::truncated_input || e.code() == ErrorCode::corrupt_input)
          << e.what();
    }
  }
  std::vector<uint8_t> bad = app;
  bad[0] ^= 1;
  expect_error(with_blob(file, BlobKind::app_state, bad), "app_state.magic");
  bad = app;
  bad[4] = 2;  // version 2
  expect_error(with_blob(file, BlobKind::app_state, bad), "version 2",
               ErrorCode::unsupported_version);
  bad = app;
  bad[7] = 0x80;  // reserved flag
  expect_error(with_blob(file, BlobKind::app_state, bad), "app_state.flags");
  bad = app;
  bad.push_back(0);
  expect_error(with_blob(file, BlobKind::app_state, bad), "trailing bytes");

  // An app_state of another state (fewer cells) disagrees with the container header.
  KvSnapshot shorter = c.snapshot;
  KvStream& st = shorter.data_stream();
  st.cells.resize(kPrefix / 2);
  for (KvLayer& l : st.layers) {
    l.k.resize(kPrefix / 2 * l.k_row_bytes);
    l.v.resize(kPrefix / 2 * l.v_row_bytes);
  }
  shorter.tokens.resize(kPrefix / 2);
  const std::vector<uint8_t> short_app =
      *CgkvReader::from_bytes(snapshot_to_cgkv(shorter, shorter.model, SnapshotEncoding::exact()))
           .read_blob(static_cast<uint32_t>(BlobKind::app_state));
  expect_error(with_blob(file, BlobKind::app_state, short_app), "cells, the container header");

  // Metadata: not JSON, not an object, wrong format tag, missing or mistyped fields.
  const auto meta = [&](const std::string& json, const std::string& why,
                        ErrorCode code = ErrorCode::corrupt_input) {
    expect_error(with_blob(file, BlobKind::metadata_json, text_bytes(json)), why, code);
  };
  meta("{not json", "not JSON");
  meta("[1,2]", "not a JSON object");
  meta(R"({"format":"x","version":1})", "'format'");
  meta(R"({"format":"cachegen.llama","version":9})", "'version'", ErrorCode::unsupported_version);
  const std::string head = R"({"format":"cachegen.llama","version":1,"architecture":"llama",)";
  meta(head + R"("n_layer":-1,"n_head_kv":1,"head_dim":8,"gguf_header_hash":"00"})", "'n_layer'");
  meta(head + R"("n_layer":5,"n_head_kv":"4","head_dim":8,"gguf_header_hash":"00"})",
       "'n_head_kv'");
  meta(head + R"("n_layer":5,"n_head_kv":4,"head_dim":8,"gguf_header_hash":"xyz"})",
       "'gguf_header_hash'");
  meta(head + R"("n_layer":5,"n_head_kv":4,"head_dim":8})", "'gguf_header_hash'");

  expect_error(with_blob(file, BlobKind::token_ids, std::vector<uint8_t>(5)), "multiple of 4");
}

}  // namespace
}  // namespace cachegen::llama
