// The native part of the Python package `cachegen` (python/cachegen/__init__.py wraps it in
// Python's idiom). Arrays come in through the buffer protocol, without copies when C-contiguous;
// cachegen::Error becomes the cachegen.Error subclass of its code; the GIL is released around
// every encode, decode and store call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "_cachegen_internal.h"
#include "cachegen/container.h"
#include "cachegen/context_store.h"
#include "cachegen/encode.h"
#include "cachegen/quality_levels.h"
#include "cachegen/store.h"

namespace py = pybind11;
using cachegen::Error;
using cachegen::ErrorCode;
using cachegen::python::bytes_of;
using cachegen::python::contiguous;

namespace cachegen::python {

// A read-only C-contiguous view of a buffer-protocol object (numpy array, bytes, memoryview...).
py::buffer_info contiguous(const py::buffer& b, const char* what) {
  py::buffer_info info = b.request();
  py::ssize_t stride = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != stride) {
      throw Error(ErrorCode::invalid_argument,
                  std::string(what) + " is not C-contiguous (use numpy.ascontiguousarray)");
    }
    stride *= info.shape[d];
  }
  return info;
}

std::span<const uint8_t> bytes_of(const py::buffer_info& info) {
  return {static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize)};
}

}  // namespace cachegen::python

namespace {

cachegen::KVDType kv_dtype(const py::buffer_info& info, bool bfloat16) {
  const std::string& f = info.format;
  if (bfloat16) {
    if (info.itemsize == 2) return cachegen::KVDType::bf16;
  } else if (f == "e" && info.itemsize == 2) {
    return cachegen::KVDType::f16;
  } else if (f == "f" && info.itemsize == 4) {
    return cachegen::KVDType::f32;
  }
  throw Error(ErrorCode::invalid_argument,
              "kv: dtype with buffer format '" + f +
                  "' is not float16 or float32 (bfloat16: pass 16-bit words with bfloat16=True)");
}

struct EncodeArgs {
  cachegen::KVEncodeOptions options;
  bool bfloat16 = false;
};

// kv: one array [n_layers, 2, n_tokens, n_kv_heads, head_dim], or a list of per-layer arrays
// [2, n_tokens, n_kv_heads, head_dim].
py::bytes encode(const py::object& kv, const cachegen::KVEncodeOptions& options, bool bfloat16,
                 const std::optional<py::buffer>& tokens) {
  std::vector<py::buffer_info> held;  // keeps every view alive while the GIL is released
  if (py::isinstance<py::list>(kv) || py::isinstance<py::tuple>(kv)) {
    for (const py::handle& layer : kv) held.push_back(contiguous(layer.cast<py::buffer>(), "kv"));
    if (held.empty()) throw Error(ErrorCode::invalid_argument, "kv: no layers");
  } else {
    held.push_back(contiguous(kv.cast<py::buffer>(), "kv"));
  }
  const bool per_layer = py::isinstance<py::list>(kv) || py::isinstance<py::tuple>(kv);
  const py::buffer_info& first = held[0];
  std::vector<size_t> shape;
  if (per_layer) shape.push_back(held.size());
  for (py::ssize_t d : first.shape) shape.push_back(static_cast<size_t>(d));
  for (const py::buffer_info& l : held) {
    if (l.shape != first.shape || l.format != first.format || (per_layer && l.ndim != 4)) {
      throw Error(ErrorCode::invalid_argument,
                  "kv: per-layer arrays must all be [2, n_tokens, n_kv_heads, head_dim] of one "
                  "dtype");
    }
  }
  const cachegen::ModelShape model =
      cachegen::kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
  cachegen::KVArrayView view;
  view.dtype = kv_dtype(first, bfloat16);
  view.n_tokens = shape[2];
  view.n_kv_heads = shape[3];
  view.head_dim = shape[4];
  const size_t layer_bytes = bytes_of(first).size() / (per_layer ? 1 : shape[0]);
  for (size_t l = 0; l < shape[0]; ++l) {
    view.layers.push_back(per_layer ? held[l].ptr
                                    : static_cast<const uint8_t*>(first.ptr) + l * layer_bytes);
  }
  std::vector<cachegen::CgkvBlob> blobs;
  if (tokens) {
    const py::buffer_info t = contiguous(*tokens, "tokens");
    if (t.itemsize != 4 || (t.format != "i" && t.format != "l" && t.format != "=i"))
      throw Error(ErrorCode::invalid_argument, "tokens must be int32");
    blobs.push_back(cachegen::token_ids_blob(
        {static_cast<const int32_t*>(t.ptr), static_cast<size_t>(t.size)}));
  }
  std::vector<uint8_t> out;
  {
    py::gil_scoped_release release;
    out = cachegen::encode_kv_array(view, model, options, blobs);
  }
  return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
}

class Reader {
 public:
  static Reader from_bytes(const py::buffer& data) {
    const py::buffer_info info = contiguous(data, "data");
    const std::span<const uint8_t> b = bytes_of(info);
    std::vector<uint8_t> copy(b.begin(), b.end());
    py::gil_scoped_release release;
    return Reader(cachegen::CgkvReader::from_bytes(std::move(copy)));
  }
  static Reader open_file(const std::string& path) {
    py::gil_scoped_release release;
    return Reader(cachegen::CgkvReader::open_file(path));
  }

  py::dict info() const {
    const cachegen::CgkvInfo& i = r_->info();
    py::dict d;
    d["n_layers"] = i.n_layers;
    d["n_attention_layers"] = i.n_attention_layers();
    d["n_kv_heads"] = i.n_kv_heads;
    d["head_dim"] = i.head_dim;
    d["n_tokens"] = i.n_tokens;
    return d;
  }
  std::string inspect_json() const {
    py::gil_scoped_release release;
    return cachegen::cgkv_inspect_json(*r_);
  }
  void verify() const {
    py::gil_scoped_release release;
    r_->verify();
  }
  // fp16 [n_attention_layers, 2, end - begin, n_kv_heads, head_dim], decoded straight into the
  // array's memory.
  py::array decode(size_t begin, size_t end) const {
    const cachegen::CgkvInfo& i = r_->info();
    const size_t n = r_->read_elements(begin, end);  // checks the range first
    // The reader refuses reads over its limit (2^30 values by default; never changed here), but
    // only once it is called: check before the array is allocated, so that a forged header's
    // token count is an error, not a huge allocation.
    constexpr size_t kReaderDefaultMaxElements = size_t{1} << 30;
    if (n > kReaderDefaultMaxElements) {
      throw Error(ErrorCode::invalid_argument,
                  "cgkv: reading tokens " + std::to_string(begin) + ":" + std::to_string(end) +
                      " needs " + std::to_string(n) + " values, over the limit of " +
                      std::to_string(kReaderDefaultMaxElements));
    }
    std::vector<py::ssize_t> shape = {
        i.n_attention_layers(), 2, static_cast<py::ssize_t>(end - begin), i.n_kv_heads, i.head_dim};
    py::array out(py::dtype("float16"), shape);
    auto* data = static_cast<cachegen::Half*>(out.mutable_data());
    {
      py::gil_scoped_release release;
      r_->read_tokens_into(begin, end, {data, n});
    }
    return out;
  }

 private:
  explicit Reader(cachegen::CgkvReader r)
      : r_(std::make_shared<cachegen::CgkvReader>(std::move(r))) {}
  std::shared_ptr<const cachegen::CgkvReader> r_;
};

// Store keys arrive as str (UTF-8) or bytes.
std::string key_of(const py::handle& key) {
  if (py::isinstance<py::bytes>(key)) return key.cast<std::string>();
  if (py::isinstance<py::str>(key)) return key.cast<std::string>();
  throw py::type_error("store keys are str or bytes");
}

class PyStore {
 public:
  PyStore(const std::string& url, bool create) {
    py::gil_scoped_release release;
    s_ = cachegen::open_store(url,
                              create ? cachegen::StoreOpen::create : cachegen::StoreOpen::existing);
  }
  void put(const py::handle& key, const py::buffer& value) {
    const std::string k = key_of(key);
    const py::buffer_info v = contiguous(value, "value");
    py::gil_scoped_release release;
    s_->put(k, bytes_of(v));
  }
  py::object get(const py::handle& key) {
    const std::string k = key_of(key);
    std::optional<std::vector<uint8_t>> v;
    {
      py::gil_scoped_release release;
      v = s_->try_get(k);
    }
    if (!v) return py::none();
    return py::bytes(reinterpret_cast<const char*>(v->data()), v->size());
  }
  bool exists(const py::handle& key) {
    const std::string k = key_of(key);
    py::gil_scoped_release release;
    return s_->exists(k);
  }
  bool remove(const py::handle& key) {
    const std::string k = key_of(key);
    py::gil_scoped_release release;
    return s_->remove(k);
  }
  std::vector<std::string> list(const std::string& prefix) {
    py::gil_scoped_release release;
    return s_->list(prefix);
  }
  std::string url() const { return s_->url(); }
  cachegen::Store& store() { return *s_; }

 private:
  std::unique_ptr<cachegen::Store> s_;
};

std::span<const int32_t> tokens_of(const py::buffer_info& t) {
  if (t.itemsize != 4 || (t.format != "i" && t.format != "l" && t.format != "=i"))
    throw Error(ErrorCode::invalid_argument, "tokens must be int32");
  return {static_cast<const int32_t*>(t.ptr), static_cast<size_t>(t.size)};
}

class PyContextStore {
 public:
  PyContextStore(PyStore& store, const py::bytes& fingerprint, size_t chunk_tokens)
      : c_(store.store(), std::string(fingerprint), options(chunk_tokens)) {}

  size_t chunk_tokens() const { return c_.chunk_tokens(); }

  // [(index, first_token, n_tokens, [levels])] of the longest stored prefix.
  py::list lookup(const py::buffer& tokens) const {
    const py::buffer_info t = contiguous(tokens, "tokens");
    std::vector<cachegen::StoredChunk> found;
    {
      py::gil_scoped_release release;
      found = c_.lookup(tokens_of(t));
    }
    py::list out;
    for (const cachegen::StoredChunk& c : found) {
      py::list levels;
      for (const cachegen::ChunkLevelEntry& e : c.levels) levels.append(e.level);
      out.append(py::make_tuple(c.index, c.first_token, c.n_tokens, levels));
    }
    return out;
  }
  void save(const py::buffer& tokens, size_t index, const std::string& level,
            const py::buffer& value) {
    const py::buffer_info t = contiguous(tokens, "tokens");
    const py::buffer_info v = contiguous(value, "value");
    py::gil_scoped_release release;
    c_.put_chunk(tokens_of(t), index, level, bytes_of(v));
  }
  // The value of chunk `index` at `level`, or None.
  py::object load(const py::buffer& tokens, size_t index, const std::string& level) const {
    const py::buffer_info t = contiguous(tokens, "tokens");
    const std::span<const int32_t> all = tokens_of(t);
    std::optional<std::vector<uint8_t>> v;
    {
      py::gil_scoped_release release;
      const std::optional<cachegen::StoredChunk> chunk = c_.find_chunk(all, index);
      if (chunk) v = c_.get_chunk(*chunk, level, all.subspan(chunk->first_token, chunk->n_tokens));
    }
    if (!v) return py::none();
    return py::bytes(reinterpret_cast<const char*>(v->data()), v->size());
  }

 private:
  static cachegen::ContextStoreOptions options(size_t chunk_tokens) {
    cachegen::ContextStoreOptions o;
    if (chunk_tokens) o.chunk_tokens = chunk_tokens;
    return o;
  }
  cachegen::ContextStore c_;
};

}  // namespace

PYBIND11_MODULE(_cachegen, m) {
  m.doc() = "Native part of the cachegen package; use `import cachegen`.";
  py::tuple levels(cachegen::kQualityLevels.size());
  for (size_t i = 0; i < levels.size(); ++i) levels[i] = cachegen::kQualityLevels[i].name;
  m.attr("LEVELS") = levels;       // the names of cachegen/quality_levels.h's table, in order
  m.attr("_errors") = py::dict();  // status code -> exception class, filled by __init__.py
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const py::dict classes = py::module_::import("cachegen._cachegen").attr("_errors");
      const py::int_ code(static_cast<int>(e.code()));
      PyObject* cls = classes.contains(code) ? classes[code].ptr() : PyExc_RuntimeError;
      PyErr_SetString(cls, e.message().c_str());
    }
  });

  py::class_<cachegen::KVEncodeOptions>(m, "EncodeOptions",
                                        "The options of `cachegen encode` (same defaults).")
      .def(py::init<>())
      .def_readwrite("bits", &cachegen::KVEncodeOptions::bits)
      .def_readwrite("layer_groups", &cachegen::KVEncodeOptions::layer_groups)
      .def_readwrite("group_size", &cachegen::KVEncodeOptions::group_size)
      .def_readwrite("chunk_tokens", &cachegen::KVEncodeOptions::chunk_tokens)
      .def_readwrite("level", &cachegen::KVEncodeOptions::level)
      .def_readwrite("params", &cachegen::KVEncodeOptions::params)
      .def_readwrite("lossless", &cachegen::KVEncodeOptions::lossless)
      .def_readwrite("rope_base", &cachegen::KVEncodeOptions::rope_base)
      .def_readwrite("rope_dims", &cachegen::KVEncodeOptions::rope_dims)
      .def_readwrite("rope_scale", &cachegen::KVEncodeOptions::rope_scale)
      .def_readwrite("rope_neox", &cachegen::KVEncodeOptions::rope_neox);

  m.def("encode", &encode, py::arg("kv"), py::arg("options"), py::arg("bfloat16"),
        py::arg("tokens"));
  m.def("error_code_name", [](int code) {
    return std::string(cachegen::error_code_name(static_cast<ErrorCode>(code)));
  });

  py::class_<Reader>(m, "Reader")
      .def_static("from_bytes", &Reader::from_bytes)
      .def_static("open_file", &Reader::open_file)
      .def("info", &Reader::info)
      .def("inspect_json", &Reader::inspect_json)
      .def("verify", &Reader::verify)
      .def("decode", &Reader::decode);

  py::class_<PyStore>(m, "Store")
      .def(py::init<const std::string&, bool>())
      .def("put", &PyStore::put)
      .def("get", &PyStore::get)
      .def("exists", &PyStore::exists)
      .def("remove", &PyStore::remove)
      .def("list", &PyStore::list)
      .def_property_readonly("url", &PyStore::url);

  py::class_<PyContextStore>(m, "ContextStore")
      .def(py::init<PyStore&, const py::bytes&, size_t>(), py::keep_alive<1, 2>())
      .def_property_readonly("chunk_tokens", &PyContextStore::chunk_tokens)
      .def("lookup", &PyContextStore::lookup)
      .def("save", &PyContextStore::save)
      .def("load", &PyContextStore::load);

#ifdef CACHEGEN_PYTHON_LLAMA
  m.attr("HAS_LLAMA") = true;
  cachegen::python::bind_llama(m);
#else
  m.attr("HAS_LLAMA") = false;
#endif
}
