// Payload on the wire: the actor handles its ActorRefs name (serialised by CAF, which makes proxies for
// them), then the Values as one blob (wire.h) whose claimed length is checked against the bytes that
// remain before anything is allocated.
#include <limits>

#include <troupe/tensor/ops.h>

#include <troupe/actors/internal/caf_types.h>
#include <troupe/actors/wire.h>

namespace troupe::actors::detail {

namespace {
// A blob larger than this is refused even when the deserializer cannot tell what remains.
constexpr uint64_t kMaxBlob = uint64_t{1} << 34;
}

caf::error save_payload(caf::serializer& f, Payload& x) {
  std::vector<caf::actor> handles;
  std::string blob;
  const DataPlane* dp = data_plane();
  wire::TensorOffloader offload;
  if (dp && x.extra && !x.extra->dp_ids.empty()) {
    offload = [&, &e = *x.extra](const Tensor& t) -> int64_t {
      if (e.dp_next < e.dp_ids.size() && on_data_plane(*dp, t)) return e.dp_ids[e.dp_next++];
      return -1;
    };
  }
  wire::encode(
      x.values, blob,
      [&](const ActorRef& r) {
        handles.push_back(r.impl()->handle);
        return static_cast<uint32_t>(handles.size() - 1);
      },
      offload);
  uint64_t n = blob.size();
  int32_t src = dp ? dp->rank : -1;
  if (auto e = f(handles, src, n)) return e;
  return n ? f.apply_raw(n, blob.data()) : caf::error{};
}

caf::error load_payload(caf::deserializer& f, Payload& x) {
  std::vector<caf::actor> handles;
  uint64_t n = 0;
  int32_t src = -1;
  if (auto e = f(handles, src, n)) return e;
  uint64_t remaining = kMaxBlob;
  if (auto* bd = dynamic_cast<caf::binary_deserializer*>(&f)) remaining = bd->remaining();
  if (n > remaining) {
    return caf::make_error(caf::sec::invalid_argument,
                           "troupe payload claims " + std::to_string(n) + " bytes, " + std::to_string(remaining) + " remain");
  }
  std::string blob(n, '\0');
  if (n) {
    if (auto e = f.apply_raw(n, blob.data())) return e;
  }
  try {
    const DataPlane* dp = data_plane();
    wire::TensorFetcher fetch;
    if (dp) {
      fetch = [&](ScalarType dtype, const std::vector<int64_t>& shape, int64_t id) {
        if (src < 0 || src >= dp->group->size() || src == dp->rank) {
          throw ActorError("[actors] wire: a data-plane tensor from rank " + std::to_string(src));
        }
        Tensor t = empty(shape, TensorOptions().dtype(dtype));
        x.ext().dp_in.push_back(dp->group->recv_async(t, src, static_cast<int>(id)));
        return t;
      };
    }
    x.values = wire::decode(
        blob.data(), blob.size(),
        [&](uint32_t i, std::string name, int rank) {
          if (i >= handles.size()) {
            throw ActorError("[actors] wire: ActorRef index " + std::to_string(i) + " of " + std::to_string(handles.size()));
          }
          return make_ref(handles[i], std::move(name), rank);
        },
        fetch);
  } catch (const std::exception& e) {
    x.values.clear();
    x.ext().decode_error = e.what();
  }
  return caf::error{};
}

}  // namespace troupe::actors::detail
