// ScriptModule::save and jit::load: the TorchScript zip archive (torch.jit.save's layout), through libzip.
//   <name>/data.pkl            the module tree: one object per module, its parameters, buffers, training flag
//   <name>/code/__torch__/...  one .py per class path, `class X(Module):` with attribute types and forward
//   <name>/constants.pkl       the tensor constants of the code (CONSTANTS.cN), storages in constants/<n>
//   <name>/data/<n>            tensor storages (raw little-endian bytes)
//   <name>/version             "3"
//   <name>/extra/<file>        the extra files
// Saving writes a temporary file beside `path` and renames it; loading reads and checks everything before
// it returns a module.
#include <zip.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <istream>
#include <iterator>
#include <ostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include <troupe/jit/parser.h>
#include <troupe/jit/pickle.h>
#include <troupe/jit/script_module.h>

namespace troupe::jit {

namespace {

// "__torch__.torch.nn.modules.linear.Linear" -> ("__torch__.torch.nn.modules.linear", "Linear")
std::pair<std::string, std::string> split_class(const std::string& q) {
  const size_t dot = q.rfind('.');
  return {q.substr(0, dot), q.substr(dot + 1)};
}

// "__torch__.torch.nn.modules.linear" -> "code/__torch__/torch/nn/modules/linear.py"
std::string code_file(const std::string& qualifier) {
  std::string p = qualifier;
  for (char& c : p)
    if (c == '.') c = '/';
  return "code/" + p + ".py";
}

std::string bytes_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

struct Saver {
  std::map<std::string, std::string> records;  // name (without the archive prefix) -> bytes
  std::map<std::string, std::string> class_code;  // qualified class -> its `class` block
  std::map<std::string, Tensor> constants;
  int storages = 0;

  void module(pickle::Writer& w, const ScriptModule& m) {
    auto [qualifier, cls] = split_class(m.qualified_name());
    std::ostringstream head;
    head << "class " << cls << "(Module):\n";
    std::vector<std::pair<std::string, Tensor>> params, buffers;
    for (const auto& [k, p] : m.named_parameters("", false)) params.emplace_back(k, p);
    for (const auto& [k, b] : m.named_buffers("", false)) buffers.emplace_back(k, b);
    head << "  __parameters__ = [";
    for (auto& [k, p] : params) head << "\"" << k << "\", ";
    head << "]\n  __buffers__ = [";
    for (auto& [k, b] : buffers) head << "\"" << k << "\", ";
    head << "]\n";
    for (auto& [k, p] : params) head << "  " << k << " : " << (p.defined() ? "Tensor" : "Optional[Tensor]") << "\n";
    for (auto& [k, b] : buffers) head << "  " << k << " : " << (b.defined() ? "Tensor" : "Optional[Tensor]") << "\n";
    head << "  training : bool\n  _is_full_backward_hook : Optional[bool]\n";
    w.object(qualifier, cls, [&] {
      auto tensor_attr = [&](const std::string& k, const Tensor& t) {
        w.str(k);
        if (!t.defined()) {
          w.none();
          return;
        }
        const std::string key = std::to_string(storages++);
        records["data/" + key] = bytes_of(t);
        w.tensor(t, key);
      };
      for (auto& [k, p] : params) tensor_attr(k, p);
      for (auto& [k, b] : buffers) tensor_attr(k, b);
      w.str("training");
      w.boolean(m.is_training());
      w.str("_is_full_backward_hook");
      w.none();
      for (const auto& [k, c] : m.named_children()) {
        auto* sc = dynamic_cast<const ScriptModule*>(c.get());
        if (!sc)
          throw std::invalid_argument("[jit::save] submodule '" + k + "' of " + m.name() +
                                      " is a " + c->name() + ", not a traced ScriptModule");
        if (!k.empty() && std::isdigit(static_cast<unsigned char>(k[0])))  // Sequential's "0": PyTorch's spelling
          head << "  __annotations__[\"" << k << "\"] = " << sc->qualified_name() << "\n";
        else
          head << "  " << k << " : " << sc->qualified_name() << "\n";
        w.str(k);
        module(w, *sc);
      }
    });
    if (class_code.count(m.qualified_name())) return;  // a class shared by several modules: one block
    std::string text = head.str();
    if (m.forward_graph()) {
      std::string fwd = print_forward(*m.forward_graph(), constants, m.qualified_name());
      std::istringstream lines(fwd);
      std::string line;
      while (std::getline(lines, line)) text += "  " + line + "\n";
    }
    class_code[m.qualified_name()] = text;
  }
};

std::string archive_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  std::string out;
  for (char c : stem) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return out.empty() ? "archive" : out;
}

}  // namespace

std::map<std::string, std::string> ScriptModule::archive_records(const ExtraFilesMap& extra_files) const {
  Saver s;
  pickle::Writer data;
  s.module(data, *this);
  s.records["data.pkl"] = data.finish();
  pickle::Writer consts;  // CONSTANTS.c0, c1, ... in their numeric order
  consts.tuple([&] {
    for (size_t k = 0; k < s.constants.size(); ++k) {
      const std::string key = std::to_string(k);
      const Tensor& t = s.constants.at("c" + key);
      s.records["constants/" + key] = bytes_of(t);
      consts.tensor(t, key);
    }
  });
  s.records["constants.pkl"] = consts.finish();
  std::map<std::string, std::string> files;
  for (const auto& [q, text] : s.class_code) files[code_file(split_class(q).first)] += text;
  for (auto& [f, text] : files) s.records[f] = text;
  s.records["version"] = "3\n";
  for (const auto& [k, v] : extra_files) s.records["extra/" + k] = v;
  return std::move(s.records);
}

namespace {

// Adds every record under `prefix` (tensor data stored as is, as torch.jit.save does; code compressed).
void add_records(zip_t* za, const std::map<std::string, std::string>& records, const std::string& prefix) {
  for (const auto& [name, bytes] : records) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    if (!src) throw std::runtime_error(zip_strerror(za));
    const zip_int64_t idx = zip_file_add(za, (prefix + name).c_str(), src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    if (idx < 0) {
      zip_source_free(src);
      throw std::runtime_error(zip_strerror(za));
    }
    const bool stored = name.rfind("data/", 0) == 0 || name.rfind("constants/", 0) == 0 || name.size() < 4 ||
                        name.compare(name.size() - 3, 3, ".py") != 0;
    zip_set_file_compression(za, static_cast<zip_uint64_t>(idx), stored ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 0);
  }
}

}  // namespace

void ScriptModule::save(std::ostream& out, const ExtraFilesMap& extra_files) const {
  const std::map<std::string, std::string> records = archive_records(extra_files);
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(nullptr, 0, 0, &ze);
  zip_t* za = src ? zip_open_from_source(src, ZIP_TRUNCATE, &ze) : nullptr;
  if (!za) {
    std::string msg = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    if (src) zip_source_free(src);
    throw std::runtime_error("[jit::save] cannot make an archive in memory: " + msg);
  }
  zip_error_fini(&ze);
  zip_source_keep(src);  // zip_close writes into it; it is read back below
  std::string bytes;
  try {
    add_records(za, records, "archive/");
    if (zip_close(za) != 0) throw std::runtime_error(zip_strerror(za));
    za = nullptr;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_source_open(src) != 0 || zip_source_stat(src, &st) != 0)
      throw std::runtime_error(zip_error_strerror(zip_source_error(src)));
    bytes.resize(st.size);
    const zip_int64_t got = zip_source_read(src, bytes.data(), st.size);
    zip_source_close(src);
    if (got != static_cast<zip_int64_t>(st.size)) throw std::runtime_error("short read of the archive in memory");
  } catch (const std::exception& e) {
    if (za) zip_discard(za);
    zip_source_free(src);
    throw std::runtime_error(std::string("[jit::save] writing the archive to a stream failed: ") + e.what());
  }
  zip_source_free(src);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("[jit::save] the stream refused the archive's " + std::to_string(bytes.size()) + " bytes");
}

void ScriptModule::save(const std::string& path, const ExtraFilesMap& extra_files) const {
  const std::map<std::string, std::string> records = archive_records(extra_files);
  const std::string prefix = archive_name(path) + "/";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int err = 0;
  zip_t* za = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!za) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    std::string msg = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    throw std::runtime_error("[jit::save] cannot write " + tmp + ": " + msg);
  }
  try {
    add_records(za, records, prefix);
    if (zip_close(za) != 0) throw std::runtime_error(zip_strerror(za));
  } catch (const std::exception& e) {
    zip_discard(za);
    std::remove(tmp.c_str());
    throw std::runtime_error("[jit::save] writing " + path + " failed: " + e.what());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error("[jit::save] cannot move " + tmp + " to " + path + ": " + ec.message());
  }
}

// ---------------------------------------------------------------------------------------------------
// load

namespace {

struct ClassDef {
  std::set<std::string> parameters;
  std::string header;               // "def forward(...) -> Tensor:"
  std::vector<std::string> body;    // statements
  std::string file;
};

std::vector<std::string> quoted_names(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while ((i = line.find('"', i)) != std::string::npos) {
    const size_t j = line.find('"', i + 1);
    if (j == std::string::npos) break;
    out.push_back(line.substr(i + 1, j - i - 1));
    i = j + 1;
  }
  return out;
}

// The `class X(Module):` blocks of one code file, by qualified name.
void read_classes(const std::string& file, const std::string& text, std::map<std::string, ClassDef>& out) {
  std::string qualifier = file.substr(5, file.size() - 8);  // strip "code/" and ".py"
  for (char& c : qualifier)
    if (c == '/') c = '.';
  std::istringstream in(text);
  std::string line;
  ClassDef* cur = nullptr;
  bool in_header = false, in_body = false;
  while (std::getline(in, line)) {
    if (line.rfind("class ", 0) == 0) {
      const std::string name = line.substr(6, line.find('(') - 6);
      cur = &out[qualifier + "." + name];
      cur->file = file;
      in_header = in_body = false;
      continue;
    }
    if (!cur) continue;
    if (line.rfind("  __parameters__ = ", 0) == 0) {
      for (auto& p : quoted_names(line)) cur->parameters.insert(p);
    } else if (line.rfind("  def forward(", 0) == 0) {
      cur->header = line.substr(2);
      in_header = line.back() != ':';
      in_body = !in_header;
    } else if (in_header) {
      cur->header += "\n" + line;
      if (!line.empty() && line.back() == ':') {
        in_header = false;
        in_body = true;
      }
    } else if (in_body) {
      if (line.rfind("    ", 0) == 0) cur->body.push_back(line.substr(4));
      else if (line.rfind("  def ", 0) == 0) in_body = false;  // other methods are not read
      else if (!line.empty()) in_body = false;
    }
  }
}

class ArchiveReader {
 public:
  explicit ArchiveReader(const std::string& path) : path_(path) {
    int err = 0;
    za_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!za_) {
      zip_error_t ze;
      zip_error_init_with_code(&ze, err);
      std::string msg = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      throw std::runtime_error("[jit::load] " + path + " is not a readable TorchScript archive: " + msg);
    }
    list_names();
  }
  void list_names() {
    const zip_int64_t n = zip_get_num_entries(za_, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(za_, static_cast<zip_uint64_t>(i), 0);
      if (name) names_.push_back(name);
    }
    if (names_.empty()) {
      zip_discard(za_);  // the destructor does not run when the constructor throws
      za_ = nullptr;
      fail("the archive is empty");
    }
    prefix_ = names_[0].substr(0, names_[0].find('/') + 1);
  }
  /// An archive held in memory; `label` names it in errors.
  ArchiveReader(std::string label, std::string bytes) : path_(std::move(label)), bytes_(std::move(bytes)) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t* src = zip_source_buffer_create(bytes_.data(), bytes_.size(), 0, &ze);
    if (src) za_ = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za_) {
      std::string msg = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      if (src) zip_source_free(src);
      throw std::runtime_error("[jit::load] " + path_ + " is not a readable TorchScript archive: " + msg);
    }
    zip_error_fini(&ze);
    list_names();
  }
  ~ArchiveReader() {
    if (za_) zip_discard(za_);
  }
  ArchiveReader(const ArchiveReader&) = delete;
  ArchiveReader& operator=(const ArchiveReader&) = delete;

  [[noreturn]] void fail(const std::string& m) const { throw std::runtime_error("[jit::load] " + path_ + ": " + m); }

  bool has(const std::string& rec) const {
    return zip_name_locate(za_, (prefix_ + rec).c_str(), 0) >= 0;
  }
  std::string read(const std::string& rec) const {
    const zip_int64_t idx = zip_name_locate(za_, (prefix_ + rec).c_str(), 0);
    if (idx < 0) fail("record " + rec + " is missing");
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za_, static_cast<zip_uint64_t>(idx), 0, &st) != 0) fail("cannot stat " + rec + ": " + zip_strerror(za_));
    zip_file_t* f = zip_fopen_index(za_, static_cast<zip_uint64_t>(idx), 0);
    if (!f) fail("cannot open " + rec + ": " + zip_strerror(za_));
    // The size in the directory is what the archive claims: the record grows as its bytes arrive (a
    // damaged directory cannot make this allocate gigabytes up front).
    std::string out;
    constexpr zip_uint64_t kChunk = 1 << 16;
    while (out.size() < st.size) {
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(std::min<zip_uint64_t>(kChunk, st.size - at)));
      const zip_int64_t r = zip_fread(f, out.data() + at, out.size() - at);
      if (r <= 0) {
        std::string msg = r < 0 ? zip_error_strerror(zip_file_get_error(f)) : "it ends after " + std::to_string(at) + " of its " + std::to_string(st.size) + " bytes";
        zip_fclose(f);
        fail("reading " + rec + " failed (" + msg + ")");
      }
      out.resize(at + static_cast<size_t>(r));
    }
    char extra;
    const zip_int64_t tail = zip_fread(f, &extra, 1);  // the CRC is checked at the end of the data
    std::string msg = tail < 0 ? zip_error_strerror(zip_file_get_error(f)) : "";
    zip_fclose(f);
    if (tail < 0) fail("reading " + rec + " failed (" + msg + ")");
    return out;
  }
  const std::vector<std::string>& names() const { return names_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string path_;
  std::string bytes_;  // the archive in memory (the buffer source reads it)
  zip_t* za_ = nullptr;
  std::vector<std::string> names_;
  std::string prefix_;
};

ScriptModulePtr build(const pickle::PValuePtr& obj, const std::map<std::string, ClassDef>& classes,
                      const std::vector<Tensor>& constants, const ArchiveReader& ar) {
  if (obj->kind != pickle::PValue::Object) ar.fail("data.pkl holds a " + std::to_string(obj->kind) + " where a module was expected");
  const std::string& q = obj->s;
  auto cd = classes.find(q);
  if (cd == classes.end()) ar.fail("class " + q + " has no code in the archive");
  auto m = std::make_shared<ScriptModule>(split_class(q).second, q);
  for (const auto& [k, v] : obj->dict) {
    const std::string& key = k->s;
    if (key == "training") {
      m->train(v->kind == pickle::PValue::Bool && v->b);
      continue;
    }
    // the names come from the file: the Module's own refusals (a "." in a name, an empty or repeated
    // one; the fuzzer found them escaping unprefixed) are the archive's errors
    auto checked = [&](auto&& register_it) {
      try {
        register_it();
      } catch (const std::exception& e) {
        ar.fail("data.pkl: " + q + " attribute '" + key + "': " + e.what());
      }
    };
    if (v->kind == pickle::PValue::TensorV || (v->kind == pickle::PValue::None && key[0] != '_')) {
      Tensor t = v->kind == pickle::PValue::TensorV ? v->tensor : Tensor();
      if (cd->second.parameters.count(key)) checked([&] { m->register_parameter(key, t, t.defined() && t.requires_grad()); });
      else checked([&] { m->register_buffer(key, t); });
    } else if (v->kind == pickle::PValue::Object) {
      auto child = std::shared_ptr<nn::Module>(build(v, classes, constants, ar));
      checked([&] { m->register_module(key, child); });
    }
  }
  if (!cd->second.header.empty())
    m->set_forward_graph(parse_forward(cd->second.header, cd->second.body, *m, constants, cd->second.file + " (" + q + ")"));
  return m;
}

}  // namespace

namespace {

ScriptModulePtr load_from(ArchiveReader& ar, const std::string& path, ExtraFilesMap& extra_files) {
  for (const char* rec : {"data.pkl", "constants.pkl", "version"})
    if (!ar.has(rec)) ar.fail(std::string("record ") + rec + " is missing: not a TorchScript archive, or a truncated one");
  std::vector<Tensor> constants;
  {
    auto c = pickle::read(ar.read("constants.pkl"), path + " constants.pkl",
                          [&](const std::string& key) { return ar.read("constants/" + key); });
    for (const auto& item : c->items) {
      if (item->kind != pickle::PValue::TensorV) ar.fail("constants.pkl holds a value that is not a tensor");
      constants.push_back(item->tensor);
    }
  }
  std::map<std::string, ClassDef> classes;
  for (const std::string& name : ar.names()) {
    if (name.rfind(ar.prefix() + "code/", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0)
      continue;
    const std::string rec = name.substr(ar.prefix().size());
    read_classes(rec, ar.read(rec), classes);
  }
  auto root = pickle::read(ar.read("data.pkl"), path + " data.pkl",
                           [&](const std::string& key) { return ar.read("data/" + key); });
  ScriptModulePtr m = build(root, classes, constants, ar);
  ExtraFilesMap found;
  for (const auto& [k, v] : extra_files)
    if (ar.has("extra/" + k)) found[k] = ar.read("extra/" + k);
  for (auto& [k, v] : found) extra_files[k] = std::move(v);
  return m;
}

}  // namespace

ScriptModulePtr load(const std::string& path, ExtraFilesMap& extra_files) {
  ArchiveReader ar(path);
  return load_from(ar, path, extra_files);
}

ScriptModulePtr load(const std::string& path) {
  ExtraFilesMap none;
  return load(path, none);
}

ScriptModulePtr load(std::istream& in, ExtraFilesMap& extra_files) {
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("[jit::load] reading the stream failed");
  const std::string label = "the archive in memory (" + std::to_string(bytes.size()) + " bytes)";
  if (bytes.empty()) throw std::runtime_error("[jit::load] " + label + " is empty: not a TorchScript archive");
  ArchiveReader ar(label, std::move(bytes));
  return load_from(ar, label, extra_files);
}

ScriptModulePtr load(std::istream& in) {
  ExtraFilesMap none;
  return load(in, none);
}

}  // namespace troupe::jit
