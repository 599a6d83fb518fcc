// Construction checks DDP and ZeRO share: arguments, and the same model and bucket layout on every rank.
#include <troupe/parallel/wrap_checks.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <troupe/tensor/ops.h>

namespace troupe::parallel::detail {

std::string shape_str(IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_module_and_group(const std::string& who, const nn::ModulePtr& module, const comm::ProcessGroupPtr& group) {
  if (!module) throw std::invalid_argument(who + " module is null");
  if (!group) {
    throw std::invalid_argument(who +
                                " no process group: pass one, or call launch::init / run under comm::run_local "
                                "first (comm::world() is null)");
  }
}

std::pair<int64_t, int64_t> bucket_limits_bytes(const std::string& who, double first_bucket_mb, double bucket_cap_mb) {
  if (!(bucket_cap_mb > 0) || !(first_bucket_mb > 0)) {
    throw std::invalid_argument(who + " bucket_cap_mb and first_bucket_mb must be positive, got " +
                                std::to_string(bucket_cap_mb) + " and " + std::to_string(first_bucket_mb));
  }
  const double mib = 1024.0 * 1024.0;
  return {static_cast<int64_t>(first_bucket_mb * mib), static_cast<int64_t>(bucket_cap_mb * mib)};
}

namespace {

// The signature as integers: [P, per parameter: requires_grad, dtype, ndim, shape...;
// B, per bucket: members, numel, dtype, unit, member indices...].
std::vector<int64_t> encode(const WrapSignature& w) {
  std::vector<int64_t> s;
  s.push_back(static_cast<int64_t>(w.params.size()));
  for (const auto& p : w.params) {
    s.push_back(p.requires_grad() ? 1 : 0);
    s.push_back(static_cast<int64_t>(p.dtype()));
    s.push_back(p.dim());
    for (int64_t d : p.sizes()) s.push_back(d);
  }
  s.push_back(static_cast<int64_t>(w.buckets.size()));
  for (const auto& b : w.buckets) {
    s.push_back(static_cast<int64_t>(b.params.size()));
    s.push_back(b.numel);
    s.push_back(static_cast<int64_t>(b.dtype));
    s.push_back(b.unit);
    for (size_t v : b.params) s.push_back(static_cast<int64_t>(v));
  }
  return s;
}

// A signature as (what, value) items, for naming the first difference; parameters are labelled with
// this rank's names.
std::vector<std::pair<std::string, std::string>> describe(const WrapSignature& w, const int64_t* s, size_t n) {
  std::vector<std::pair<std::string, std::string>> items;
  size_t pos = 0;
  auto next = [&]() -> int64_t { return pos < n ? s[pos++] : -1; };
  auto dtype_str = [](int64_t d) -> std::string {
    if (d < 0 || d > 64) return "dtype#" + std::to_string(d);
    return dtype_name(static_cast<ScalarType>(d));
  };
  const int64_t P = next();
  items.push_back({"number of parameters", std::to_string(P)});
  for (int64_t i = 0; i < P && pos < n; ++i) {
    const int64_t rg = next(), dt = next(), nd = next();
    std::vector<int64_t> sz;
    for (int64_t d = 0; d < nd && pos < n; ++d) sz.push_back(next());
    std::string what = "parameter " + std::to_string(i);
    if (static_cast<size_t>(i) < w.names.size()) what += " (" + w.names[static_cast<size_t>(i)] + ")";
    items.push_back({what, "shape " + shape_str(sz) + " dtype " + dtype_str(dt) + (rg ? " requires_grad" : " no grad")});
  }
  const int64_t B = next();
  items.push_back({"number of " + w.bucket_noun + "s", std::to_string(B)});
  for (int64_t b = 0; b < B && pos < n; ++b) {
    const int64_t cnt = next(), numel = next(), dt = next(), unit = next();
    std::vector<int64_t> vars;
    for (int64_t k = 0; k < cnt && pos < n; ++k) vars.push_back(next());
    items.push_back({w.bucket_noun + " " + std::to_string(b), (unit >= 0 ? "unit " + std::to_string(unit) + ", " : "") +
                                                                  "parameters " + shape_str(vars) + ", " +
                                                                  std::to_string(numel) + " elements of " + dtype_str(dt)});
  }
  return items;
}

}  // namespace

void verify_across_ranks(const comm::ProcessGroupPtr& group, const std::string& who, const WrapSignature& w) {
  const int n = group->size();
  if (n == 1) return;
  std::vector<int64_t> mine = encode(w);
  Tensor len = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size())});
  Tensor lens = empty({n}, TensorOptions(kInt64));
  group->all_gather_into_tensor(lens, len);
  std::vector<int64_t> L = lens.to_vector<int64_t>();
  const int64_t max_len = *std::max_element(L.begin(), L.end());
  mine.resize(static_cast<size_t>(max_len), -1);
  Tensor sig = tensor(mine);
  Tensor all = empty({n * max_len}, TensorOptions(kInt64));
  group->all_gather_into_tensor(all, sig);
  std::vector<int64_t> A = all.to_vector<int64_t>();
  auto items0 = describe(w, A.data(), static_cast<size_t>(L[0]));
  for (int r = 1; r < n; ++r) {
    auto items = describe(w, A.data() + static_cast<size_t>(r) * max_len, static_cast<size_t>(L[r]));
    for (size_t k = 0; k < std::max(items0.size(), items.size()); ++k) {
      const bool has0 = k < items0.size(), hasr = k < items.size();
      if (has0 && hasr && items0[k] == items[k]) continue;
      std::ostringstream os;
      os << who << " the model on rank " << r << " differs from rank 0's (every rank must wrap the same "
         << "parameters, in the same order, with the same " << w.options << "): ";
      if (has0 && hasr && items0[k].first == items[k].first)
        os << items0[k].first << ": rank 0 has " << items0[k].second << ", rank " << r << " has " << items[k].second;
      else if (has0 && hasr)
        os << "rank 0 has " << items0[k].first << ": " << items0[k].second << "; rank " << r << " has "
           << items[k].first << ": " << items[k].second;
      else if (has0)
        os << "rank 0 has " << items0[k].first << ": " << items0[k].second << "; rank " << r << " has none";
      else
        os << "rank " << r << " has " << items[k].first << ": " << items[k].second << "; rank 0 has none";
      throw std::runtime_error(os.str());
    }
  }
}

}  // namespace troupe::parallel::detail
