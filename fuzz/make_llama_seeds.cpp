// Writes the seed corpora of fuzz_llama_state and fuzz_llama_blobs (small states: 2 layers,
// 3 cells, f16/q8_0, both V layouts, with and without cell ext). Built by the fuzz preset;
// run by hand when the formats change: make_llama_seeds fuzz/corpus
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cachegen/llama.h"
#include "llama/cgkv_blobs.h"

namespace llama = cachegen::llama;

namespace {

void write(const std::string& path, uint8_t selector, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(&selector, 1, 1, f) != 1 ||
      std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
}

llama::KvSnapshot snapshot(llama::StateKind kind, bool v_trans, bool cell_ext, bool run,
                           int32_t type) {
  llama::KvSnapshot s;
  s.kind = kind;
  s.seq_id = 0;
  s.arch_tag = kind == llama::StateKind::context ? "llama" : "";
  s.cell_ext = cell_ext;
  s.tokens = {1, 15, 27};
  llama::KvStream st;
  for (int32_t i = 0; i < 3; ++i) {
    llama::KvCell c;
    c.pos = run ? i : 2 * i + 1;
    c.seq_ids = {0};
    if (cell_ext) c.ext = {i, 0, -1};
    st.cells.push_back(c);
  }
  st.v_trans = v_trans;
  const size_t row_elems = 32;  // one q8_0 block
  const size_t row_bytes = type == llama::kTypeQ8_0 ? 34 : 2 * row_elems;
  for (int l = 0; l < 2; ++l) {
    llama::KvLayer layer;
    layer.k_type = type;
    layer.k_row_bytes = row_bytes;
    layer.k.resize(3 * row_bytes);
    for (size_t i = 0; i < layer.k.size(); ++i) layer.k[i] = static_cast<uint8_t>(i * 7 + l);
    layer.v_type = v_trans ? llama::kTypeF16 : type;
    layer.v_row_bytes = v_trans ? 2 * row_elems : row_bytes;
    if (v_trans) {
      layer.v_elem_bytes = 2;
      layer.n_embd_v = row_elems;
    }
    layer.v.resize(3 * layer.v_row_bytes);
    for (size_t i = 0; i < layer.v.size(); ++i) layer.v[i] = static_cast<uint8_t>(i * 13 + l);
    st.layers.push_back(layer);
  }
  s.streams.push_back(llama::KvStream{});  // an empty stream first, as unified caches write
  s.streams.push_back(st);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string state = std::string(argv[1]) + "/fuzz_llama_state/";
  const std::string blobs = std::string(argv[1]) + "/fuzz_llama_blobs/";
  int n = 0;
  for (int kind = 0; kind < 2; ++kind) {
    for (int v_trans = 0; v_trans < 2; ++v_trans) {
      const bool ext = v_trans == 1 && kind == 0;
      const int32_t type = v_trans == 1 ? llama::kTypeF16 : llama::kTypeQ8_0;
      const auto s =
          snapshot(static_cast<llama::StateKind>(kind), v_trans == 1, ext, kind == 0, type);
      const uint8_t ext_bit = ext ? 4 : 0;
      const std::string tag = std::to_string(n++);
      write(state + "state" + tag, static_cast<uint8_t>(kind | ext_bit), llama::build_state(s));
      write(state + "file" + tag, static_cast<uint8_t>(2 | ext_bit), llama::build_state_file(s));
      write(blobs + "app_state" + tag, 0, llama::detail::encode_app_state(s));
      llama::ModelIdentity id{"llama", 2, 1, 32, 0x0123456789abcdefull};
      if (kind == 0) write(blobs + "metadata" + tag, 1, llama::detail::encode_metadata(id, s));
    }
  }
  return 0;
}
