// The enum-like constants of the options structs, spelled as libtorch's (troupe::kMean, kSum, kNone, kBatchMean,
// kSame, kValid, kZeros, kConstant, kReflect, kReplicate, kCircular, kNearest, kNearestExact, kLinear, kBilinear,
// kBicubic, kTrilinear, kArea, kTanh, kReLU, kGELU): each is the one value of its own tag type in
// troupe::enumtype, so an option accepts exactly the constants it supports, and each converts to the string
// PyTorch's Python API uses ("mean", "same", "reflect", ...) for options that keep that string.
//
//   nn::MSELossOptions(troupe::kSum);  nn::Conv2dOptions(3, 8, 3).padding(troupe::kSame);
#pragma once

#include <string>

namespace troupe {
namespace enumtype {

/// Declares the tag type k<Name>, converting to the string `python_name`.
#define TROUPE_ENUM_TAG(Name, python_name)               \
  struct k##Name {                                       \
    operator std::string() const { return python_name; } \
  };

TROUPE_ENUM_TAG(None, "none")
TROUPE_ENUM_TAG(Mean, "mean")
TROUPE_ENUM_TAG(Sum, "sum")
TROUPE_ENUM_TAG(BatchMean, "batchmean")
TROUPE_ENUM_TAG(Valid, "valid")
TROUPE_ENUM_TAG(Same, "same")
TROUPE_ENUM_TAG(Zeros, "zeros")
TROUPE_ENUM_TAG(Constant, "constant")
TROUPE_ENUM_TAG(Reflect, "reflect")
TROUPE_ENUM_TAG(Replicate, "replicate")
TROUPE_ENUM_TAG(Circular, "circular")
TROUPE_ENUM_TAG(Nearest, "nearest")
TROUPE_ENUM_TAG(NearestExact, "nearest-exact")
TROUPE_ENUM_TAG(Linear, "linear")
TROUPE_ENUM_TAG(Bilinear, "bilinear")
TROUPE_ENUM_TAG(Bicubic, "bicubic")
TROUPE_ENUM_TAG(Trilinear, "trilinear")
TROUPE_ENUM_TAG(Area, "area")
// RNN nonlinearities and transformer activations
TROUPE_ENUM_TAG(Tanh, "tanh")
TROUPE_ENUM_TAG(ReLU, "relu")
TROUPE_ENUM_TAG(GELU, "gelu")

#undef TROUPE_ENUM_TAG

}  // namespace enumtype

/// The constants themselves: `reduction(troupe::kNone)`.
inline constexpr enumtype::kNone kNone{};
inline constexpr enumtype::kMean kMean{};
inline constexpr enumtype::kSum kSum{};
inline constexpr enumtype::kBatchMean kBatchMean{};
inline constexpr enumtype::kValid kValid{};
inline constexpr enumtype::kSame kSame{};
inline constexpr enumtype::kZeros kZeros{};
inline constexpr enumtype::kConstant kConstant{};
inline constexpr enumtype::kReflect kReflect{};
inline constexpr enumtype::kReplicate kReplicate{};
inline constexpr enumtype::kCircular kCircular{};
inline constexpr enumtype::kNearest kNearest{};
inline constexpr enumtype::kNearestExact kNearestExact{};
inline constexpr enumtype::kLinear kLinear{};
inline constexpr enumtype::kBilinear kBilinear{};
inline constexpr enumtype::kBicubic kBicubic{};
inline constexpr enumtype::kTrilinear kTrilinear{};
inline constexpr enumtype::kArea kArea{};
inline constexpr enumtype::kTanh kTanh{};
inline constexpr enumtype::kReLU kReLU{};
inline constexpr enumtype::kGELU kGELU{};

}  // namespace troupe
