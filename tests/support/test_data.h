// Test support: access to the golden vectors in tests/data/golden.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cachegen/npy.h"

namespace cachegen::test {

std::string golden_dir();
const nlohmann::json& golden_expected();
NpyArray golden_npy(const std::string& file);
std::vector<float> golden_f32(const std::string& file);

}  // namespace cachegen::test
