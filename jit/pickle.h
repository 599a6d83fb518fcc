// The subset of Python's pickle (protocol 2) that TorchScript archives use: a writer for data.pkl and
// constants.pkl (objects by class name, dicts of attributes, tensors as torch._utils._rebuild_tensor_v2
// with persistent storage ids) and a reader for the same subset, as PyTorch 1.13 writes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::jit::pickle {

struct PValue;
using PValuePtr = std::shared_ptr<PValue>;

/// One unpickled value.
struct PValue {
  enum Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Object, TensorV };
  Kind kind = None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                       // Str; Global and Object: the class "module.name"
  std::vector<PValuePtr> items;                        // Tuple, List
  std::vector<std::pair<PValuePtr, PValuePtr>> dict;   // Dict; Object: its attributes (from BUILD)
  Tensor tensor;                                       // TensorV
  /// The Dict / Object entry whose key is the string `key` (null when absent).
  PValuePtr get(const std::string& key) const;
};

/// Writes pickle opcodes into a byte string (protocol 2, as torch.jit.save).
class Writer {
 public:
  /// Starts with PROTO 2.
  Writer();
  /// An object of class `module.name` with these attributes (NEWOBJ + BUILD); `write_attrs` writes the
  /// key/value pairs.
  void object(const std::string& module, const std::string& name, const std::function<void()>& write_attrs);
  /// A string key.
  void str(const std::string& s);
  void boolean(bool b);
  void none();
  void integer(int64_t v);
  /// A tensor as torch._utils._rebuild_tensor_v2 of storage `key` (its bytes go to data/<key>).
  void tensor(const Tensor& t, const std::string& key);
  /// A tuple of the values `write_items` writes.
  void tuple(const std::function<void()>& write_items);
  /// Ends the pickle (STOP) and returns the bytes.
  std::string finish();

 private:
  void op(uint8_t c) { out_.push_back(static_cast<char>(c)); }
  void global(const std::string& module, const std::string& name);
  std::string out_;
};

/// Reads storages by key (data/<key> of the archive) as raw bytes.
using StorageLoader = std::function<std::string(const std::string& key)>;

/// Parses `bytes` (what `what` names in errors); tensors get their storages from `load`. Throws
/// std::runtime_error "[jit::load] <what>: ..." naming the opcode or class it cannot read.
PValuePtr read(const std::string& bytes, const std::string& what, const StorageLoader& load);

/// The storage class of a dtype ("FloatStorage") and back.
std::string storage_class(ScalarType t);
ScalarType storage_dtype(const std::string& storage_class);

}  // namespace troupe::jit::pickle
