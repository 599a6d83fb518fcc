// serialize::OutputArchive / InputArchive over nn::save's checkpoint format, and the operators that put
// tensors and modules into them.
#include <troupe/nn/archive.h>

#include <istream>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>

namespace troupe::serialize {
namespace {

void check_key(const std::string& key, const char* fn) {
  if (key.empty()) throw std::invalid_argument(std::string("[") + fn + "] the key is empty");
}

/// A read-only streambuf over caller memory (load_from(data, size) without copying).
class MemoryBuf : public std::streambuf {
 public:
  MemoryBuf(const char* data, size_t size) {
    char* p = const_cast<char*>(data);
    setg(p, p, p + size);
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    char* target = (dir == std::ios_base::beg ? eback() : dir == std::ios_base::cur ? gptr() : egptr()) + off;
    if (target < eback() || target > egptr()) return pos_type(off_type(-1));
    setg(eback(), target, egptr());
    return pos_type(target - eback());
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }
};

}  // namespace

// ---- OutputArchive

void OutputArchive::write(const std::string& key, const Tensor& tensor, bool /*is_buffer*/) {
  check_key(key, "serialize::OutputArchive::write");
  if (!tensor.defined())
    throw std::invalid_argument("[serialize::OutputArchive::write] the tensor for key '" + key + "' is undefined");
  if (Tensor* existing = entries_.find(key)) *existing = tensor;
  else entries_.insert(key, tensor);
}

void OutputArchive::write(const std::string& key, OutputArchive& nested_archive) {
  check_key(key, "serialize::OutputArchive::write");
  if (&nested_archive == this)
    throw std::invalid_argument("[serialize::OutputArchive::write] an archive cannot be nested in itself (key '" +
                                key + "')");
  for (const auto& [name, t] : nested_archive.entries_) write(key + "." + name, t);
}

void OutputArchive::save_to(const std::string& filename) { nn::save(entries_, filename); }

void OutputArchive::save_to(std::ostream& stream) { nn::save(entries_, stream); }

void OutputArchive::save_to(const std::function<size_t(const void*, size_t)>& func) {
  if (!func) throw std::invalid_argument("[serialize::OutputArchive::save_to] the writer function is empty");
  std::ostringstream out(std::ios::binary);
  nn::save(entries_, out);
  const std::string bytes = std::move(out).str();
  const size_t taken = func(bytes.data(), bytes.size());
  if (taken != bytes.size())
    throw std::runtime_error("[serialize::OutputArchive::save_to] the writer function took " + std::to_string(taken) +
                             " of " + std::to_string(bytes.size()) + " bytes");
}

// ---- InputArchive

void InputArchive::set_entries(nn::StateDict entries, std::string source, const std::optional<Device>& device) {
  if (device && !device->is_cpu())
    for (auto& item : entries) item.value() = item.value().to(*device);
  entries_ = std::make_shared<const nn::StateDict>(std::move(entries));
  prefix_.clear();
  source_ = std::move(source);
}

void InputArchive::load_from(const std::string& filename, std::optional<Device> device) {
  set_entries(nn::load_state_dict_file(filename), "'" + filename + "'", device);
}

void InputArchive::load_from(std::istream& stream, std::optional<Device> device) {
  set_entries(nn::load_state_dict_file(stream), "<stream>", device);
}

void InputArchive::load_from(const char* data, size_t size, std::optional<Device> device) {
  if (!data && size) throw std::invalid_argument("[serialize::InputArchive::load_from] data is null");
  MemoryBuf buf(data, size);
  std::istream in(&buf);
  set_entries(nn::load_state_dict_file(in), "<memory>", device);
}

const Tensor* InputArchive::find(const std::string& key) const {
  return entries_ ? entries_->find(prefix_ + key) : nullptr;
}

bool InputArchive::try_read(const std::string& key, Tensor& tensor, bool /*is_buffer*/) {
  const Tensor* found = find(key);
  if (!found) return false;
  if (tensor.defined()) {
    NoGradGuard no_grad;
    tensor.set_data(*found);
  } else {
    tensor = *found;
  }
  return true;
}

void InputArchive::read(const std::string& key, Tensor& tensor, bool is_buffer) {
  if (!try_read(key, tensor, is_buffer))
    throw std::runtime_error("No such serialized tensor '" + prefix_ + key + "' in " + source_);
}

bool InputArchive::try_read(const std::string& key, InputArchive& archive) {
  if (!entries_) return false;
  const std::string nested = prefix_ + key + ".";
  for (const auto& item : *entries_)
    if (item.key().compare(0, nested.size(), nested) == 0) {
      archive.entries_ = entries_;
      archive.prefix_ = nested;
      archive.source_ = source_;
      return true;
    }
  return false;
}

void InputArchive::read(const std::string& key, InputArchive& archive) {
  if (!try_read(key, archive))
    throw std::runtime_error("No such serialized submodule: '" + prefix_ + key + "' in " + source_);
}

std::vector<std::string> InputArchive::keys() {
  std::vector<std::string> out;
  if (!entries_) return out;
  std::unordered_set<std::string> seen;
  for (const auto& item : *entries_) {
    const std::string& k = item.key();
    if (k.compare(0, prefix_.size(), prefix_) != 0) continue;
    std::string first = k.substr(prefix_.size(), k.find('.', prefix_.size()) - prefix_.size());
    if (seen.insert(first).second) out.push_back(std::move(first));
  }
  return out;
}

nn::StateDict InputArchive::tensors() const {
  nn::StateDict out;
  if (!entries_) return out;
  for (const auto& item : *entries_)
    if (item.key().compare(0, prefix_.size(), prefix_) == 0) out.insert(item.key().substr(prefix_.size()), item.value());
  return out;
}

// ---- operators

OutputArchive& operator<<(OutputArchive& archive, const Tensor& tensor) {
  archive.write("0", tensor);
  return archive;
}

InputArchive& operator>>(InputArchive& archive, Tensor& tensor) {
  archive.read("0", tensor);
  return archive;
}

OutputArchive& operator<<(OutputArchive& archive, const std::shared_ptr<nn::Module>& module) {
  if (!module) throw std::invalid_argument("[troupe::save] the module is null");
  for (const auto& [name, t] : module->state_dict()) archive.write(name, t);
  return archive;
}

InputArchive& operator>>(InputArchive& archive, const std::shared_ptr<nn::Module>& module) {
  if (!module) throw std::invalid_argument("[troupe::load] the module is null (loading from " + archive.source() + ")");
  nn::StateDict wanted;
  for (const auto& item : module->state_dict()) {
    Tensor t;
    if (!archive.try_read(item.key(), t))
      throw std::runtime_error("[troupe::load] No such serialized tensor '" + archive.prefix() + item.key() + "' in " +
                               archive.source() + " (loading " + module->name() + ")");
    wanted.insert(item.key(), t);
  }
  try {
    module->load_state_dict(wanted, /*strict=*/true);
  } catch (const std::exception& e) {
    throw std::runtime_error("[troupe::load] from " + archive.source() + ": " + e.what());
  }
  return archive;
}

}  // namespace troupe::serialize
