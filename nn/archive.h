// libtorch's torch::serialize::OutputArchive / InputArchive and the troupe::save / troupe::load front
// (torch::save / torch::load) for tensors, lists of tensors and modules; optim/serialize.h adds optimizers.
//
//   troupe::save(model, "model.pt");                 // std::shared_ptr<Net>, or a holder with .ptr()
//   troupe::load(model, "model.pt");                 // into a model of the same shape
//   troupe::serialize::OutputArchive archive;
//   archive.write("weights", w);  archive.write("sub", nested);  archive.save_to("ckpt.pt");
//
// The file is nn::save's checkpoint (nn/serialize.h), not libtorch's zip/pickle archive: an archive is a
// flat dict of tensors whose nested archives are dotted prefixes ("sub.x"), so a module saved here is
// its state_dict, and nn::load / nn::load_state_dict_file read it (and troupe::load reads nn::save's).
// The archives live in troupe::serialize, as in libtorch, though the folder is nn/ (the layer that owns
// the format).
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <troupe/nn/module.h>
#include <troupe/nn/state_dict.h>
#include <troupe/tensor/device.h>
#include <troupe/tensor/tensor.h>

namespace troupe::serialize {

/// Collects named tensors and nested archives, then writes them to a file or a stream (save_to).
class OutputArchive {
 public:
  OutputArchive() = default;
  OutputArchive(OutputArchive&&) = default;
  OutputArchive& operator=(OutputArchive&&) = default;
  OutputArchive(const OutputArchive&) = delete;
  OutputArchive& operator=(const OutputArchive&) = delete;

  /// Stores `tensor` (a handle: later in-place changes before save_to are saved) under `key`; writing a
  /// key again replaces it. `is_buffer` is accepted for libtorch's signature and not recorded.
  void write(const std::string& key, const Tensor& tensor, bool is_buffer = false);
  /// Stores every entry of `nested_archive` under "key.<its key>".
  void write(const std::string& key, OutputArchive& nested_archive);
  /// Writes the archive to `filename` atomically (the old file stays whole if anything fails).
  void save_to(const std::string& filename);
  /// Writes the archive to `stream`.
  void save_to(std::ostream& stream);
  /// Hands the archive's bytes to `func` (which returns how many it took; fewer is an error).
  void save_to(const std::function<size_t(const void*, size_t)>& func);
  /// archive(key, value...) is write(key, value...).
  template <typename... Ts>
  void operator()(Ts&&... ts) {
    write(std::forward<Ts>(ts)...);
  }

  /// The entries written so far, nested ones with dotted names (troupe's addition).
  const nn::StateDict& tensors() const { return entries_; }

 private:
  nn::StateDict entries_;
};

/// Reads what an OutputArchive (or nn::save) wrote: tensors by key, nested archives by prefix.
class InputArchive {
 public:
  InputArchive() = default;
  InputArchive(InputArchive&&) = default;
  InputArchive& operator=(InputArchive&&) = default;
  InputArchive(const InputArchive&) = delete;
  InputArchive& operator=(const InputArchive&) = delete;

  /// Reads `key` into `tensor`: a defined tensor takes the data in place (set_data, under no_grad, so
  /// module members and optimizers keep seeing it), an undefined one becomes the read tensor. Throws
  /// std::runtime_error "No such serialized tensor 'key' in '<file>'" when it is missing.
  void read(const std::string& key, Tensor& tensor, bool is_buffer = false);
  /// read() that returns false instead of throwing when `key` is missing.
  bool try_read(const std::string& key, Tensor& tensor, bool is_buffer = false);
  /// Makes `archive` the nested archive `key` (every entry "key.<name>"); throws when there is none.
  void read(const std::string& key, InputArchive& archive);
  /// read() of a nested archive that returns false when it is missing.
  bool try_read(const std::string& key, InputArchive& archive);
  /// Reads the file; tensors go to `device` (default: the CPU). Errors name the file and the problem.
  void load_from(const std::string& filename, std::optional<Device> device = std::nullopt);
  /// Reads one archive from `stream`.
  void load_from(std::istream& stream, std::optional<Device> device = std::nullopt);
  /// Reads an archive from `size` bytes at `data`.
  void load_from(const char* data, size_t size, std::optional<Device> device = std::nullopt);
  /// The names at this level: tensor keys and nested archive names, in file order, each once.
  std::vector<std::string> keys();
  /// archive(key, value...) is read(key, value...).
  template <typename... Ts>
  void operator()(Ts&&... ts) {
    read(std::forward<Ts>(ts)...);
  }

  /// Every tensor under this archive's prefix, with the prefix removed (troupe's addition).
  nn::StateDict tensors() const;
  /// Where the archive came from, for error messages: "'path'", "<stream>" or "<memory>" (troupe's addition).
  const std::string& source() const { return source_; }
  /// The nested archive's dotted prefix ("fc."; empty at the top) (troupe's addition).
  const std::string& prefix() const { return prefix_; }

 private:
  void set_entries(nn::StateDict entries, std::string source, const std::optional<Device>& device);
  const Tensor* find(const std::string& key) const;

  std::shared_ptr<const nn::StateDict> entries_;
  std::string prefix_;
  std::string source_ = "<empty archive>";
};

/// archive.write("0", tensor) (libtorch's operator<< of a tensor).
OutputArchive& operator<<(OutputArchive& archive, const Tensor& tensor);
/// archive.read("0", tensor).
InputArchive& operator>>(InputArchive& archive, Tensor& tensor);
/// Writes the module's state_dict (parameters and persistent buffers, children as nested archives).
OutputArchive& operator<<(OutputArchive& archive, const std::shared_ptr<nn::Module>& module);
/// Loads every entry of the module's state_dict from the archive (entries the module lacks are ignored,
/// as in libtorch); a missing entry throws naming the key and the file; shapes are checked by
/// load_state_dict before anything changes.
InputArchive& operator>>(InputArchive& archive, const std::shared_ptr<nn::Module>& module);

/// Anything whose ptr() gives a module: libtorch's module holders (troupe::nn::Linear).
template <typename Holder>
concept ModuleHolderLike = requires(const Holder& h) {
  { h.ptr() } -> std::convertible_to<std::shared_ptr<nn::Module>>;
};
/// archive << holder.ptr().
template <ModuleHolderLike Holder>
OutputArchive& operator<<(OutputArchive& archive, const Holder& holder) {
  return archive << std::shared_ptr<nn::Module>(holder.ptr());
}
/// archive >> holder.ptr().
template <ModuleHolderLike Holder>
InputArchive& operator>>(InputArchive& archive, const Holder& holder) {
  return archive >> std::shared_ptr<nn::Module>(holder.ptr());
}

}  // namespace troupe::serialize

namespace troupe {

/// torch::save(value, file or stream): `archive << value`, then archive.save_to(args...). Works for a
/// Tensor, a module (std::shared_ptr<M> or a holder), an optimizer (optim/serialize.h) and anything
/// else with an operator<< to an OutputArchive.
template <typename Value, typename... SaveToArgs>
  requires requires(serialize::OutputArchive& a, const Value& v) { a << v; }
void save(const Value& value, SaveToArgs&&... args) {
  serialize::OutputArchive archive;
  archive << value;
  archive.save_to(std::forward<SaveToArgs>(args)...);
}

/// torch::save of a list of tensors: keys "0", "1", ...
template <typename... SaveToArgs>
void save(const std::vector<Tensor>& tensor_vec, SaveToArgs&&... args) {
  serialize::OutputArchive archive;
  for (size_t i = 0; i < tensor_vec.size(); ++i) archive.write(std::to_string(i), tensor_vec[i]);
  archive.save_to(std::forward<SaveToArgs>(args)...);
}

/// torch::load(value, file or stream): archive.load_from(args...), then `archive >> value`.
template <typename Value, typename... LoadFromArgs>
  requires requires(serialize::InputArchive& a, Value& v) { a >> v; }
void load(Value& value, LoadFromArgs&&... args) {
  serialize::InputArchive archive;
  archive.load_from(std::forward<LoadFromArgs>(args)...);
  archive >> value;
}

/// torch::load of a list of tensors: appends "0", "1", ... until a key is missing.
template <typename... LoadFromArgs>
void load(std::vector<Tensor>& tensor_vec, LoadFromArgs&&... args) {
  serialize::InputArchive archive;
  archive.load_from(std::forward<LoadFromArgs>(args)...);
  for (size_t i = 0;; ++i) {
    Tensor t;
    if (!archive.try_read(std::to_string(i), t)) break;
    tensor_vec.push_back(std::move(t));
  }
}

}  // namespace troupe
