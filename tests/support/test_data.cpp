#include "support/test_data.h"

#include <fstream>
#include <stdexcept>

namespace cachegen::test {

std::string golden_dir() {
  return std::string(CACHEGEN_TEST_DATA_DIR) + "/golden";
}

const nlohmann::json& golden_expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(golden_dir() + "/expected.json");
    if (!in) throw std::runtime_error("cannot open " + golden_dir() + "/expected.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

NpyArray golden_npy(const std::string& file) {
  return read_npy(golden_dir() + "/" + file);
}

std::vector<float> golden_f32(const std::string& file) {
  const NpyArray a = golden_npy(file);
  const auto v = a.as<float>();
  return {v.begin(), v.end()};
}

}  // namespace cachegen::test
