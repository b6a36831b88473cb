// `cachegen eval`: the rate–quality table on a real model.
// `cachegen llama inspect STATE`: what a llama.cpp state file holds.
// `cachegen llama pack STATE -o STATE.cgkv` / `unpack STATE.cgkv -o STATE`: state files in the
// .cgkv container (llama::snapshot_to_cgkv / cgkv_to_snapshot).
// (`cachegen llama demo`: llama_demo.cpp.)
#include "llama_commands.h"

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/npy.h"
#include "cachegen/transform.h"
#include "llama_cli.h"

namespace cachegen::cli {
namespace {
// K or V bits, "-" where the row is priced as one file (no split).
std::string kv_bits(double b) {
  char s[16];
  std::snprintf(s, sizeof s, "%6.2f", b);
  return std::isnan(b) ? "     -" : s;
}

void print_table(const std::vector<llama::EvalRow>& rows) {
  std::printf("%-30s %7s %6s %6s %8s %10s %7s %8s %9s %9s %9s\n", "method", "bits/el", "K", "V",
              "x fp16", "KL", "top1", "ppl", "ppl_exact", "enc ms", "dec ms");
  for (const llama::EvalRow& r : rows) {
    std::printf("%-30s %7.3f %s %s %8.2f %10.3g %6.1f%% %8.4f %9.4f %9.1f %9.1f\n",
                r.method.c_str(), r.bits_per_element, kv_bits(r.k_bits).c_str(),
                kv_bits(r.v_bits).c_str(), r.ratio_vs_fp16, r.kl, 100 * r.top1, r.ppl, r.ppl_exact,
                r.encode_ms, r.decode_ms);
  }
}

// `--sweep rate`: one line per row, grouped by family, in the order measured.
void print_rate_table(const std::vector<llama::EvalRow>& rows) {
  std::printf("%-11s %-30s %-7s %7s %10s %7s %8s\n", "family", "method", "priced", "bits/el", "KL",
              "top1", "ppl");
  for (const llama::EvalRow& r : rows) {
    std::printf("%-11s %-30s %-7s %7.3f %10.3g %6.1f%% %8.4f\n", r.family.c_str(), r.method.c_str(),
                r.priced.c_str(), r.bits_per_element, r.kl, 100 * r.top1, r.ppl);
  }
}

void add_eval(CLI::App& app) {
  auto o = std::make_shared<llama::EvalOptions>();  // kept by the callback
  auto json = std::make_shared<bool>(false);
  auto svg = std::make_shared<std::string>();
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
  cmd->add_option("--sweep", o->sweep,
                  "rate: bits/element vs KL/top-1/ppl of our ladder and the baselines "
                  "(KIVI, TurboQuant-style, llama.cpp q8_0/q4_0) instead of the default table")
      ->check(CLI::IsMember({"rate"}));
  cmd->add_option("--svg", *svg, "also write the KL vs bits/element plot (SVG) to this file");
  cmd->add_option("--profile", o->profile_path,
                  "calibration profile of the model (cachegen calibrate): adds our transform "
                  "rows (its levels; with --sweep rate a ladder of bits-per-element targets)");
  cmd->callback([o, json, svg] {
    o->model_path = resolve_model(o->model_path);
    const auto progress = [json](const std::string& line) {
      if (!*json) std::fprintf(stderr, "eval: %s\n", line.c_str());
    };
    const std::vector<llama::EvalRow> rows = llama::evaluate_kv_quality(*o, progress);
    if (!svg->empty()) {
      const std::string title = std::filesystem::path(o->model_path).filename().string() + ", " +
                                std::to_string(o->n_contexts) + " windows of " +
                                std::to_string(o->prefix) + " + " + std::to_string(o->n_continue) +
                                " tokens";
      const std::string doc = llama::eval_rows_svg(rows, title);
      write_file_atomic(
          *svg, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(doc.data()), doc.size()));
    }
    if (!*json) {
      std::printf("model %s, %d windows: prefix %d tokens, %d scored, group %zu, flash-attn %s\n",
                  o->model_path.c_str(), o->n_contexts, o->prefix, o->n_continue, o->group_size,
                  o->flash_attn ? "on" : "off");
      if (o->sweep == "rate") {
        print_rate_table(rows);
      } else {
        print_table(rows);
      }
      return;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const llama::EvalRow& r : rows) {
      out.push_back({{"method", r.method},
                     {"family", r.family},
                     {"priced", r.priced},
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

void add_calibrate(CLI::App& app) {
  auto o = std::make_shared<llama::CalibrateOptions>();
  auto out = std::make_shared<std::string>();
  auto no_levels = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure a model's calibration profile (PCA transforms, sensitivities, level scales) on "
      "real KV");
  cmd->add_option("--model", o->model_path, "GGUF model (default: $CACHEGEN_MODEL)");
  cmd->add_option("--text", o->text_path, "UTF-8 text (windows are taken from its end)")
      ->required();
  cmd->add_option("-o,--output", *out, "the profile to write (.cgprof)")->required();
  cmd->add_option("--windows", o->n_windows, "windows of the text")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "tokens captured per window")->capture_default_str();
  cmd->add_option("--continue", o->n_continue, "tokens scored per window")->capture_default_str();
  cmd->add_option("--block", o->block, "PCA over a layer's whole row (layer) or per head (head)")
      ->check(CLI::IsMember({"layer", "head"}))
      ->capture_default_str();
  cmd->add_option("--rotation", o->rotation,
                  "pca (measured), or a fixed rotation to compare with: hadamard (random signs), "
                  "identity")
      ->check(CLI::IsMember({"pca", "hadamard", "identity"}))
      ->capture_default_str();
  cmd->add_option("--probe-noise", o->probe_noise, "relative noise power of the sensitivity probes")
      ->capture_default_str();
  cmd->add_option("--bands", o->bands,
                  "bands of PCA components whose sensitivities are measured apart (1 = per tensor)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--sink-tokens", o->sink_tokens,
                  "first tokens coded at a finer step (with --sink-scale)")
      ->capture_default_str();
  cmd->add_option("--sink-scale", o->sink_scale, "their step relative to the others, (0, 1]")
      ->capture_default_str();
  cmd->add_flag("--no-levels", *no_levels, "do not calibrate the quality levels' scales");
  cmd->add_flag("--flash-attn", o->flash_attn, "flash attention on (V row-major)");
  cmd->add_option("--threads", o->n_threads, "llama.cpp threads")->capture_default_str();
  cmd->callback([o, out, no_levels] {
    o->model_path = resolve_model(o->model_path);
    o->levels = !*no_levels;
    const KvProfile p = llama::calibrate_profile(
        *o, [](const std::string& line) { std::fprintf(stderr, "calibrate: %s\n", line.c_str()); });
    const std::vector<uint8_t> bytes = p.serialize();
    write_file_atomic(*out, bytes);
    std::printf("%s: profile %016llx, %zu bytes, %d layers, block %zu\n", out->c_str(),
                static_cast<unsigned long long>(p.id()), bytes.size(), p.n_layers, p.block);
  });
}

void add_inspect(CLI::App& llama_cmd) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = llama_cmd.add_subcommand("inspect", "describe a llama.cpp state file");
  cmd->add_option("STATE", *path, "file from llama_state_seq_save_file / llama_state_save_file")
      ->required();
  cmd->callback([path] {
    const std::vector<uint8_t> bytes = read_file_bytes(*path);
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

void add_pack(CLI::App& llama_cmd) {
  struct Args {
    std::string in, out, model;
    LevelArgs level;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = llama_cmd.add_subcommand(
      "pack", "compress a llama.cpp sequence or session state file into a .cgkv");
  cmd->add_option("STATE", a->in, "file from llama_state_seq_save_file / llama_state_save_file")
      ->required();
  cmd->add_option("-o,--output", a->out, "the .cgkv to write")->required();
  cmd->add_option("--model", a->model,
                  "GGUF model that wrote the state: recorded so restores into another model are "
                  "refused (optional)");
  add_level_options(cmd, a->level);
  cmd->callback([a] {
    const std::vector<uint8_t> bytes = read_file_bytes(a->in);
    std::unique_ptr<llama::Model> model;
    if (!a->model.empty()) {
      model = std::make_unique<llama::Model>(a->model);
    } else if (!a->level.lossless && !uses_bits(a->level) && a->level.level != "lossless") {
      std::fprintf(stderr,
                   "note: without --model, level %s stores keys as given and stores layer 0 "
                   "instead of recomputing it (both need the model): larger, lower quality\n",
                   a->level.level.c_str());
    }
    const llama::PackedState packed =
        llama::pack_state_file(bytes, model.get(), pack_options(a->level));
    const llama::KvSnapshot& s = packed.snapshot;
    const std::vector<uint8_t>& out = packed.cgkv;
    write_file_atomic(a->out, out);
    const size_t elements = kv_elements(s);
    std::printf(
        "%s state file, %zu tokens, %zu cells: %zu bytes -> %zu bytes (%.2fx smaller), %s, "
        "%.3f bits per K/V element (%.2fx vs fp16)\n",
        s.kind == llama::StateKind::sequence ? "sequence" : "session", s.tokens.size(), s.n_cells(),
        bytes.size(), out.size(),
        static_cast<double>(bytes.size()) / static_cast<double>(out.size()),
        level_name(a->level).c_str(),
        8.0 * static_cast<double>(out.size()) / static_cast<double>(elements),
        static_cast<double>(elements * 2) / static_cast<double>(out.size()));
  });
}

void add_unpack(CLI::App& llama_cmd) {
  struct Args {
    std::string in, out, model, profile;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = llama_cmd.add_subcommand(
      "unpack", "rebuild a llama.cpp state file from a .cgkv written by pack (or demo)");
  cmd->add_option("CGKV", a->in, "the .cgkv file")->required();
  cmd->add_option("-o,--output", a->out, "the state file to write")->required();
  cmd->add_option("--model", a->model,
                  "GGUF model that wrote the state: needed when the file recomputes layers "
                  "(quality levels recompute layer 0 from the token ids)");
  cmd->add_option("--profile", a->profile, "the calibration profile a transform file needs");
  cmd->callback([a] {
    CgkvReader reader = CgkvReader::open_file(a->in);
    if (!a->profile.empty())
      reader.set_profile(std::make_shared<const KvProfile>(read_profile(a->profile)));
    std::unique_ptr<llama::Model> model;
    if (!a->model.empty()) model = std::make_unique<llama::Model>(a->model);
    const llama::KvSnapshot s = llama::unpack_snapshot(reader, model.get());
    const std::vector<uint8_t> bytes = llama::build_state_file(s);
    write_file_atomic(a->out, bytes);
    std::printf("%s state file, %zu tokens, %zu cells, %s: %zu bytes written to %s\n",
                s.kind == llama::StateKind::sequence ? "sequence" : "session", s.tokens.size(),
                s.n_cells(),
                reader.info().codec == ContainerCodec::lossless_fp16 ? "exact (lossless)"
                : reader.info().codec == ContainerCodec::transform   ? "decoded (transform)"
                                                                     : "dequantized",
                bytes.size(), a->out.c_str());
  });
}

}  // namespace

void add_llama_commands(CLI::App& app) {
  add_eval(app);
  add_calibrate(app);
  CLI::App* llama_cmd = app.add_subcommand("llama", "llama.cpp KV caches and state files");
  llama_cmd->require_subcommand(1);
  add_inspect(*llama_cmd);
  add_pack(*llama_cmd);
  add_unpack(*llama_cmd);
  add_demo(*llama_cmd);
  add_run(*llama_cmd);
}

}  // namespace cachegen::cli
