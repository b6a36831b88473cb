// `cachegen bench seed`: the reference module's synthetic benchmark, from the golden inputs
// (numpy default_rng(0): a random walk x0.12 and iid N(0,1), 256 tokens x 128 channels),
// at 3 and 4 bits, group 32.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/quant.h"
#include "commands.h"

namespace cachegen::cli {
namespace {

struct SeedOptions {
  bool json = false;
  std::string data_dir;
};

struct SeedRow {
  std::string name;
  int bits;
  size_t n_tokens, n_channels, fixed_bytes, estimated_bytes, coded_bytes;
};

SeedRow run_case(const SeedOptions& o, const std::string& name, int bits) {
  const std::string file = "golden/bench_" + name + "_" + std::to_string(bits) + "bit_input.npy";
  const NpyArray in = read_npy(find_data_file(o.data_dir, file));
  if (in.dtype != NpyDType::f32 || in.shape.size() != 2) {
    throw Error(ErrorCode::corrupt_input, file + ": expected a 2-d float32 array");
  }
  const size_t n = in.shape[0], d = in.shape[1];
  const CodeStream s = quantize_to_codes(in.as<float>(), n, d, bits, 32);
  // The real bitstream: the codec's compact parameters (see codec.h, encode_values), all side
  // information included, decoded back and checked before its size is reported.
  CodeStream coded_codes;
  const std::vector<uint8_t> coded =
      encode_values(in.as<float>(), n, d, bits, 32, {}, &coded_codes);
  if (decode(coded).codes != coded_codes.codes) {
    throw Error(ErrorCode::corrupt_input, "codec round trip failed on " + file);
  }
  return {name, bits, n, d, fixed_width_bytes(s), entropy_coded_bytes(s, true, true), coded.size()};
}

double savings(size_t fixed, size_t other) {
  return fixed == 0 ? 0.0 : 100.0 * (1.0 - static_cast<double>(other) / static_cast<double>(fixed));
}

void run(const SeedOptions& o) {
  std::vector<SeedRow> rows;
  for (const char* name : {"correlated", "iid"}) {
    for (int bits : {3, 4}) rows.push_back(run_case(o, name, bits));
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const SeedRow& r : rows) {
      out.push_back({{"case", r.name},
                     {"bits", r.bits},
                     {"group_size", 32},
                     {"n_tokens", r.n_tokens},
                     {"n_channels", r.n_channels},
                     {"fixed_bytes", r.fixed_bytes},
                     {"estimated_bytes", r.estimated_bytes},
                     {"estimated_savings_pct", savings(r.fixed_bytes, r.estimated_bytes)},
                     {"coded_bytes", r.coded_bytes},
                     {"coded_savings_pct", savings(r.fixed_bytes, r.coded_bytes)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("cachegen seed benchmark: 256 tokens x 128 channels, group 32\n");
  std::printf("%-11s %4s %12s %16s %9s %12s %9s\n", "case", "bits", "fixed_bytes",
              "estimated_bytes", "savings", "coded_bytes", "savings");
  for (const SeedRow& r : rows) {
    std::printf("%-11s %4d %12zu %16zu %8.1f%% %12zu %8.1f%%\n", r.name.c_str(), r.bits,
                r.fixed_bytes, r.estimated_bytes, savings(r.fixed_bytes, r.estimated_bytes),
                r.coded_bytes, savings(r.fixed_bytes, r.coded_bytes));
  }
  std::printf(
      "estimated = the reference's per-channel token-delta entropy estimate (no coder)\n"
      "coded     = the real rANS bitstream (headers, compact parameters, models included)\n");
}

}  // namespace

void add_bench_seed(CLI::App& bench) {
  auto opts = std::make_shared<SeedOptions>();
  CLI::App* cmd = bench.add_subcommand("seed", "the reference's synthetic size benchmark");
  cmd->add_flag("--json", opts->json, "print one JSON array");
  cmd->add_option("--data", opts->data_dir, "directory holding golden/bench_*_input.npy");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace cachegen::cli
