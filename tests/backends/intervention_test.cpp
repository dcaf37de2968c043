// The Intervention JSON is what the results database stores and what
// ga-serve receives: it must round-trip, canonicalise, and reject bad fields
// with a message naming the field.
#include "methods/intervention.hpp"

#include <gtest/gtest.h>

namespace midtune {
namespace {

using nlohmann::json;

std::string error_of(const json& j) {
  try {
    Intervention::from_json(j);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Intervention, EveryFieldRoundTrips) {
  Intervention iv;
  iv.rope_scale = {{1.5}, {1.2, 1.3, 1.4}};
  iv.mspoe = MsPoe{1.1, 1.9, 3, 2.5, "entropy", true, 7};
  iv.position_map = PositionMap{"hourglass", 10000, 6, 900, 1000, 0.95};
  iv.siw = Siw{0.5, 1.5, 1.2, {4, 5, 6}};
  iv.hidden_channel = HiddenChannel{17, -0.5, {10, 11}};
  const Intervention back = Intervention::from_json(iv.to_json());
  EXPECT_EQ(back, iv);
  EXPECT_EQ(back.canonical(), iv.canonical());
  EXPECT_FALSE(iv.empty());
  EXPECT_TRUE(Intervention{}.empty());
}

TEST(Intervention, ScaleBroadcastRules) {
  Intervention pi;
  pi.rope_scale = {{1.7}};
  EXPECT_DOUBLE_EQ(pi.scale_for(12, 4), 1.7);
  Intervention lpes;
  lpes.rope_scale = {{1.1}, {1.2}, {1.3}};
  EXPECT_DOUBLE_EQ(lpes.scale_for(2, 8), 1.3);
  Intervention per_head;
  per_head.rope_scale = {{1.0, 2.0}, {3.0, 4.0}};
  EXPECT_DOUBLE_EQ(per_head.scale_for(1, 0), 3.0);
  EXPECT_DOUBLE_EQ(Intervention{}.scale_for(5, 5), 1.0);
}

TEST(Intervention, CanonicalTextIgnoresFloatNoise) {
  Intervention a, b;
  a.rope_scale = {{1.5}, {1.2}};
  b.rope_scale = {{1.5 + 1e-13}, {1.2 - 1e-13}};
  EXPECT_EQ(a.canonical(), b.canonical());
  b.rope_scale[1][0] = 1.25;
  EXPECT_NE(a.canonical(), b.canonical());
  EXPECT_EQ(fnv1a_hex(a.canonical()).size(), 16u);
}

TEST(Intervention, BadFieldsNameFieldAndReason) {
  EXPECT_NE(error_of({{"rope_scal", json::array()}}).find("rope_scal: unknown field"), std::string::npos);
  EXPECT_NE(error_of({{"rope_scale", {{1.0, -2.0}}}}).find("rope_scale[0]"), std::string::npos);
  EXPECT_NE(error_of({{"mspoe", {{"min_ratio", 2.0}, {"max_ratio", 1.0}}}}).find("min_ratio must be <= max_ratio"),
            std::string::npos);
  EXPECT_NE(error_of({{"mspoe", {{"first_layer", 1e30}}}}).find("mspoe.first_layer"), std::string::npos);
  EXPECT_NE(error_of({{"mspoe", {{"order", "sideways"}}}}).find("mspoe.order"), std::string::npos);
  EXPECT_NE(error_of({{"position_map", {{"kind", "spiral"}}}}).find("position_map.kind"), std::string::npos);
  EXPECT_NE(error_of({{"siw", {{"layers", {1, -3}}}}}).find("siw.layers"), std::string::npos);
  EXPECT_NE(error_of({{"hidden_channel", {{"scale", 0.5}}}}).find("hidden_channel.channel"), std::string::npos);
  EXPECT_NE(error_of(json::array()).find("must be an object"), std::string::npos);
}

}  // namespace
}  // namespace midtune
