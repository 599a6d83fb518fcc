// The messages of the front's failed checks (checks.h), the group description in them, and new_group's
// rank-list check and split.
#include <troupe/comm/checks.h>

#include <algorithm>
#include <sstream>

namespace troupe::comm::detail {

std::string group_desc(const std::string& name, const std::string& backend, int rank, int size, Device device) {
  return "group '" + name + "' (" + backend + ", rank " + std::to_string(rank) + " of " + std::to_string(size) +
         (device.is_cuda() ? ", " + device.str() : std::string()) + ")";
}

void fail_device(const std::string& where, const char* what, const Tensor& t, const std::string& backend,
                 Device device) {
  if (device.is_cpu()) {
    throw CommError(where + ": " + what + " is on " + t.device().str() + "; the " + backend +
                    " backend takes CPU tensors (comm::make_staged_group moves tensors of another device through it)");
  }
  if (!t.is_cuda()) {
    throw CommError(where + ": " + what + " is on " + t.device().str() + "; the " + backend +
                    " backend takes CUDA tensors on " + device.str() + " (use the mpi or local backend for CPU tensors)");
  }
  throw CommError(where + ": " + what + " is on " + t.device().str() + ", the group's device is " + device.str());
}

void fail_self_peer(const std::string& where, const char* what, int peer, const std::string& backend) {
  throw CommError(where + ": " + what + " " + std::to_string(peer) + " is this rank; the " + backend +
                  " backend cannot send to or receive from itself");
}

void fail_tag(const std::string& where, int tag, int max_tag) {
  throw CommError(where + ": tag " + std::to_string(tag) + " is not in [0, " + std::to_string(max_tag) + "]");
}

std::string shape_str(const Tensor& t) {
  std::ostringstream os;
  os << "(";
  for (int64_t d = 0; d < t.dim(); ++d) os << (d ? ", " : "") << t.size(d);
  os << (t.dim() == 1 ? ",)" : ")");
  return os.str();
}

void fail_undefined(const std::string& where, const char* what) { throw CommError(where + ": " + what + " is undefined"); }

void fail_not_contiguous(const std::string& where, const char* what, const Tensor& t) {
  throw CommError(where + ": " + what + " " + shape_str(t) +
                  " is not contiguous; pass a contiguous tensor (.contiguous(), then copy back)");
}

void fail_dtype(const std::string& where, const std::string& what, const Tensor& t, const Tensor& ref) {
  throw CommError(where + ": " + what + " is " + dtype_name(t.dtype()) + ", expected " + dtype_name(ref.dtype()));
}

void fail_list_count(const std::string& where, const char* what, size_t count, int size) {
  throw CommError(where + ": " + what + " holds " + std::to_string(count) + " tensors, expected " +
                  std::to_string(size) + " (the group size)");
}

void fail_list_numel(const std::string& where, const std::string& name, const Tensor& t, const Tensor& like) {
  throw CommError(where + ": " + name + " has " + std::to_string(t.numel()) + " elements " + shape_str(t) +
                  ", expected " + std::to_string(like.numel()) + " " + shape_str(like));
}

void fail_avg(const std::string& where, ScalarType dtype) {
  throw CommError(where + ": AVG needs a floating dtype, got " + dtype_name(dtype));
}

void fail_rank(const std::string& where, const char* what, int r, int size) {
  throw CommError(where + ": " + what + " " + std::to_string(r) + " is not in [0, " + std::to_string(size) + ")");
}

void fail_gather_sizes(const std::string& where, const Tensor& output, const Tensor& input, int size) {
  throw CommError(where + ": output has " + std::to_string(output.numel()) + " elements " + shape_str(output) +
                  ", expected size * input.numel() = " + std::to_string(size) + " * " + std::to_string(input.numel()));
}

void fail_scatter_sizes(const std::string& where, const Tensor& output, const Tensor& input, int size) {
  throw CommError(where + ": input has " + std::to_string(input.numel()) + " elements " + shape_str(input) +
                  ", expected size * output.numel() = " + std::to_string(size) + " * " + std::to_string(output.numel()));
}

void fail_all_to_all_sizes(const std::string& where, const Tensor& output, const Tensor& input, int size) {
  if (input.numel() % size != 0) {
    throw CommError(where + ": input has " + std::to_string(input.numel()) + " elements " + shape_str(input) +
                    ", not divisible by the group size " + std::to_string(size));
  }
  throw CommError(where + ": output has " + std::to_string(output.numel()) + " elements, input has " +
                  std::to_string(input.numel()));
}

NewGroupSplit new_group_split(const std::string& where, const std::vector<int>& ranks, int rank, int size) {
  if (ranks.empty()) throw CommError(where + ": ranks is empty");
  std::vector<bool> seen(size, false);
  NewGroupSplit out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the list
  for (size_t i = 0; i < ranks.size(); ++i) {
    int r = ranks[i];
    if (r < 0 || r >= size) {
      throw CommError(where + ": rank " + std::to_string(r) + " is not in [0, " + std::to_string(size) + ")");
    }
    if (seen[r]) throw CommError(where + ": rank " + std::to_string(r) + " appears twice");
    seen[r] = true;
    if (r == rank) {
      out.color = 0;
      out.key = static_cast<int>(i);
    }
    h = (h ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
  }
  out.check = static_cast<int64_t>(h & 0x7fffffffffffffffull);
  return out;
}

SubgroupPlan plan_subgroup(const std::string& where, const std::vector<int64_t>& all, int rank, int color,
                           int64_t check, const GroupOptions& parent, const std::optional<GroupOptions>& given) {
  const int n = static_cast<int>(all.size() / 3);
  for (int r = 0; r < n; ++r) {
    if (all[3 * r + 2] != check) {
      throw CommError(where + ": ranks passed different rank lists (rank " + std::to_string(r) + "'s differs from rank " +
                      std::to_string(rank) + "'s)");
    }
  }
  SubgroupPlan plan;
  std::vector<std::pair<int64_t, int>> by_key;  // (key, parent rank): the new ranks' order
  for (int r = 0; r < n; ++r) {
    if (color >= 0 && all[3 * r] == color) by_key.push_back({all[3 * r + 1], r});
  }
  std::sort(by_key.begin(), by_key.end());
  for (size_t i = 0; i < by_key.size(); ++i) {
    plan.members.push_back(by_key[i].second);
    if (by_key[i].second == rank) plan.new_rank = static_cast<int>(i);
  }
  plan.options = subgroup_options(parent, given, plan.members);
  return plan;
}

GroupOptions subgroup_options(const GroupOptions& parent, const std::optional<GroupOptions>& given,
                              const std::vector<int>& members) {
  GroupOptions o = given ? *given : parent;
  if (!given || given->name.empty() || given->name == GroupOptions{}.name) {
    o.name = parent.name + "/group[";
    for (size_t i = 0; i < members.size(); ++i) o.name += (i ? "," : "") + std::to_string(members[i]);
    o.name += "]";
  }
  return o;
}

}  // namespace troupe::comm::detail
