// Model-aware validation of whole Interventions (clear
// messages for invalid parameters).
#include <gtest/gtest.h>

#include <string>

#include "backends/engine/hooks/validate.hpp"

namespace midtune::engine::hooks {
namespace {

const ModelShape kSmol{.layers = 30, .heads = 9, .kv_heads = 3, .hidden = 576};

std::string message_of(const Intervention& iv) {
  try {
    validate_intervention(iv, kSmol);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ValidateIntervention, AcceptsPaperDefaults) {
  Intervention iv;
  iv.mspoe = MsPoe{};
  iv.position_map = PositionMap{"decay"};
  iv.siw = Siw{0.8, 1.2, 1.0, {5, 6, 7}};
  iv.hidden_channel = HiddenChannel{17, 0.0, {8, 9, 10}};
  EXPECT_EQ(message_of(iv), "");
  EXPECT_EQ(message_of(Intervention{}), "");
}

TEST(ValidateIntervention, NamesFieldAndReason) {
  Intervention a;
  a.mspoe = MsPoe{};
  a.mspoe->min_ratio = 1.9;
  EXPECT_NE(message_of(a).find("intervention.mspoe.min_ratio: 1.9"), std::string::npos) << message_of(a);

  Intervention b;
  b.hidden_channel = HiddenChannel{576, 0.0, {10}};
  EXPECT_NE(message_of(b).find("intervention.hidden_channel.channel: 576 is outside the hidden size 576"),
            std::string::npos) << message_of(b);

  Intervention c;
  c.hidden_channel = HiddenChannel{5, 0.0, {10, 31}};
  EXPECT_NE(message_of(c).find("intervention.hidden_channel.layers: layer 31"), std::string::npos) << message_of(c);

  Intervention d;
  d.position_map = PositionMap{"moses"};
  d.position_map->gap = -2;
  EXPECT_NE(message_of(d).find("intervention.position_map.gap"), std::string::npos) << message_of(d);

  Intervention e;
  e.siw = Siw{1, 1, 1, {-1}};
  EXPECT_NE(message_of(e).find("intervention.siw.layers"), std::string::npos) << message_of(e);

  Intervention f;
  f.rope_scale = {{1.0, 2.0}};
  EXPECT_NE(message_of(f).find("intervention.rope_scale[0]"), std::string::npos) << message_of(f);

  Intervention g;
  g.mspoe = MsPoe{};
  g.mspoe->first_layer = 40;
  EXPECT_NE(message_of(g).find("intervention.mspoe.first_layer"), std::string::npos) << message_of(g);
}

}  // namespace
}  // namespace midtune::engine::hooks
