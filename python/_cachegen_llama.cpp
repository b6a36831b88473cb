// The llama.cpp part of the native module (builds with CACHEGEN_WITH_LLAMA only): state files
// packed into .cgkv bytes and back through cachegen_llama's pack_state_file / unpack_snapshot,
// the functions `cachegen llama pack` / `unpack` call. The GIL is released around model loads,
// packs and unpacks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "_cachegen_internal.h"
#include "cachegen/container.h"
#include "cachegen/llama.h"

namespace py = pybind11;

namespace {

class PyLlamaModel {
 public:
  explicit PyLlamaModel(const std::string& path) {
    py::gil_scoped_release release;
    m_ = std::make_unique<cachegen::llama::Model>(path);
  }
  const cachegen::llama::Model& model() const { return *m_; }
  std::string path() const { return m_->path(); }

 private:
  std::unique_ptr<cachegen::llama::Model> m_;
};

const cachegen::llama::Model* model_of(const PyLlamaModel* m) {
  return m != nullptr ? &m->model() : nullptr;
}

py::bytes to_bytes(const std::vector<uint8_t>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size()};
}

py::bytes llama_pack(const py::buffer& state, const PyLlamaModel* model, const std::string& level,
                     bool lossless, std::optional<int> bits, size_t group_size,
                     size_t chunk_tokens) {
  const py::buffer_info in = cachegen::python::contiguous(state, "state");
  cachegen::llama::PackOptions o;
  o.level = level;
  o.lossless = lossless;
  o.bits = bits;
  o.group_size = group_size;
  o.chunk_tokens = chunk_tokens;
  std::vector<uint8_t> out;
  {
    py::gil_scoped_release release;
    out = cachegen::llama::pack_state_file(cachegen::python::bytes_of(in), model_of(model), o).cgkv;
  }
  return to_bytes(out);
}

py::bytes llama_unpack(const py::buffer& data, const PyLlamaModel* model) {
  const py::buffer_info in = cachegen::python::contiguous(data, "data");
  const std::span<const uint8_t> bytes = cachegen::python::bytes_of(in);
  std::vector<uint8_t> out;
  {
    py::gil_scoped_release release;
    const cachegen::CgkvReader reader =
        cachegen::CgkvReader::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()));
    out = cachegen::llama::build_state_file(
        cachegen::llama::unpack_snapshot(reader, model_of(model)));
  }
  return to_bytes(out);
}

}  // namespace

namespace cachegen::python {

void bind_llama(py::module_& m) {
  py::class_<PyLlamaModel>(m, "LlamaModel", "A GGUF model loaded by cachegen (weights only).")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("path", &PyLlamaModel::path);
  m.def("llama_pack", &llama_pack, py::arg("state"), py::arg("model"), py::arg("level"),
        py::arg("lossless"), py::arg("bits"), py::arg("group_size"), py::arg("chunk_tokens"));
  m.def("llama_unpack", &llama_unpack, py::arg("data"), py::arg("model"));
}

}  // namespace cachegen::python
