// The method registry (methods/registry.hpp): every method is listed once,
// each method's part of the Intervention round-trips through JSON with the
// canonical text pinned (it is the evaluation cache key, so it must never
// drift), and each method's validation names its field and the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "methods/method_checks.hpp"
#include "methods/pi.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

const ModelShape kSmol{.layers = 30, .heads = 9, .kv_heads = 3, .hidden = 576};

std::string validation_error(const Intervention& iv) {
  try {
    validate_intervention(iv, kSmol);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(MethodRegistry, ListsEveryMethodOnce) {
  EXPECT_EQ(method_names(), (std::vector<std::string>{"lpes", "pi", "mspoe", "caliope", "siw", "phs", "temperature",
                                                      "selfextend", "string"}));
  const std::set<std::string> unique(method_names().begin(), method_names().end());
  EXPECT_EQ(unique.size(), method_names().size());
  EXPECT_EQ(gene_table_methods(),
            (std::vector<std::string>{"mspoe", "caliope", "siw", "phs", "temperature", "selfextend", "string"}));
  EXPECT_EQ(intervention_fields(),
            (std::vector<std::string>{"rope_scale", "mspoe", "position_map", "siw", "hidden_channel",
                                      "attention_temperature", "self_extend", "string_shift"}));
  EXPECT_EQ(method_named("temperature").mechanism, Mechanism::layer_score_scales);
  EXPECT_EQ(method_named("selfextend").mechanism, Mechanism::distance_remap);
  EXPECT_EQ(method_named("string").mechanism, Mechanism::distance_remap);
  EXPECT_TRUE(mechanism_needs(Mechanism::distance_remap).rope_positions);
  EXPECT_EQ(mechanism_needs(Mechanism::layer_score_scales), MechanismNeeds{})
      << "a factor fixed before the pass: prefixes shareable, no RoPE needed";
  EXPECT_EQ(method_named("pi").field, "rope_scale") << "PI writes LPES's field";
  EXPECT_EQ(find_method("spiral"), nullptr);
  EXPECT_THROW(method_named("spiral"), std::invalid_argument);
}

TEST(MethodRegistry, EveryModuleIsComplete) {
  for (const MethodModule* m : method_modules()) {
    SCOPED_TRACE(m->name);
    EXPECT_TRUE(m->is_set && m->write_json && m->read_json && m->validate && m->copy_field && m->set_probe);
    EXPECT_EQ(m->has_gene_table(), m->apply_genes != nullptr);
    for (const GeneOrder& order : m->orders) {
      const auto named = [&](const std::string& gene) {
        return std::any_of(m->genes.begin(), m->genes.end(), [&](const GeneSchema& s) { return s.name == gene; });
      };
      EXPECT_TRUE(named(order.lower) && named(order.upper)) << order.lower << " <= " << order.upper;
    }
    // The probe is set, valid on any model with one layer and one channel,
    // and copies over.
    Intervention probe;
    m->set_probe(probe);
    EXPECT_TRUE(m->is_set(probe));
    EXPECT_EQ(intervention_fields_set(probe), std::vector<std::string>{m->field});
    EXPECT_NO_THROW(validate_intervention(probe, ModelShape{.layers = 1, .heads = 1, .kv_heads = 1, .hidden = 1}));
    Intervention copy;
    m->copy_field(probe, copy);
    EXPECT_EQ(copy, probe);
  }
}

// How a backend runs an Intervention follows from the mechanisms of the
// fields it sets, each field having one (a method sharing a field shares its
// owner's mechanism).
TEST(MethodRegistry, EveryMethodDrivesItsFieldsMechanism) {
  for (const MethodModule* m : method_modules()) {
    SCOPED_TRACE(m->name);
    ASSERT_TRUE(m->mechanism.has_value());
    const auto owner = std::find_if(field_owners().begin(), field_owners().end(),
                                    [&](const MethodModule* o) { return o->field == m->field; });
    ASSERT_NE(owner, field_owners().end());
    EXPECT_EQ(m->mechanism, (*owner)->mechanism);
    Intervention probe;
    m->set_probe(probe);
    EXPECT_EQ(intervention_needs(probe), mechanism_needs(*m->mechanism));
  }
  EXPECT_EQ(intervention_needs(Intervention{}), MechanismNeeds{});
  // Combined methods need the union: CALIOPE alone needs no one-call
  // prefill, with SIW it does.
  Intervention both;
  method_named("caliope").set_probe(both);
  EXPECT_TRUE(intervention_needs(both).prompt_alone);
  EXPECT_FALSE(intervention_needs(both).one_call_prefill);
  method_named("siw").set_probe(both);
  EXPECT_TRUE(intervention_needs(both).one_call_prefill);
  EXPECT_TRUE(intervention_needs(both).host_round_trip);
}

// On a model without RoPE (MPT's ALiBi) every method whose mechanism scales or
// remaps RoPE positions is refused by name, with the reason and the
// architecture; the others validate as on any model. The rule follows the
// mechanism: exactly the mechanisms that say rope_positions are refused.
TEST(MethodRegistry, RopeMechanismsAreRefusedByNameWithoutRope) {
  const ModelShape mpt{.layers = 2, .heads = 4, .kv_heads = 4, .hidden = 64, .rope = false, .architecture = "mpt"};
  int refused = 0;
  for (const MethodModule* m : method_modules()) {
    SCOPED_TRACE(m->name);
    Intervention probe;
    m->set_probe(probe);
    if (mechanism_needs(*m->mechanism).rope_positions) {
      ++refused;
      try {
        validate_intervention(probe, mpt);
        ADD_FAILURE() << "accepted without RoPE";
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("intervention." + m->field), std::string::npos) << what;
        EXPECT_NE(what.find(m->name), std::string::npos) << what;
        EXPECT_NE(what.find("has no RoPE"), std::string::npos) << what;
        EXPECT_NE(what.find("'mpt'"), std::string::npos) << what;
      }
    } else {
      EXPECT_NO_THROW(validate_intervention(probe, mpt));
    }
    EXPECT_NO_THROW(validate_intervention(probe, ModelShape{.layers = 2, .heads = 4, .kv_heads = 4, .hidden = 64}));
  }
  EXPECT_EQ(refused, 6);  // lpes, pi, mspoe, caliope, selfextend, string
}

// register_method() refuses, naming the method and the reason, a module that
// would break the registry's contract, and then leaves the registry as it was.
TEST(MethodRegistry, RegisterMethodRefusesWhatWouldBreakTheContract) {
  const auto refusal = [](const MethodModule& m) -> std::string {
    try {
      register_method(m);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  MethodModule taken = method_named("caliope");
  EXPECT_NE(refusal(taken).find("register_method('caliope'): a method of that name exists"), std::string::npos);
  MethodModule no_field = method_named("caliope");
  no_field.name = "toy";
  no_field.field = "positions";
  EXPECT_NE(refusal(no_field).find("field 'positions' is not an Intervention field (fields: rope_scale, mspoe, "),
            std::string::npos);
  MethodModule other_mechanism = method_named("caliope");
  other_mechanism.name = "toy";
  other_mechanism.mechanism = Mechanism::key0_weight;
  EXPECT_NE(refusal(other_mechanism).find("field 'position_map' drives mechanism prompt_positions, not key0_weight"),
            std::string::npos);
  MethodModule incomplete = method_named("caliope");
  incomplete.name = "toy";
  incomplete.apply_genes = nullptr;
  EXPECT_NE(refusal(incomplete).find("a function of its module is missing"), std::string::npos);
  EXPECT_EQ(method_names(), (std::vector<std::string>{"lpes", "pi", "mspoe", "caliope", "siw", "phs", "temperature",
                                                      "selfextend", "string"}));
}

TEST(MethodRegistry, PaperDefaultsAreTheParameterDefaults) {
  const auto paper = [](const std::string& method, const std::string& gene) {
    for (const GeneSchema& s : method_named(method).genes) {
      if (s.name == gene) return *s.paper_default;
    }
    throw std::logic_error("no gene " + gene);
  };
  EXPECT_EQ(paper("mspoe", "min_ratio"), GeneValue(1.2));
  EXPECT_EQ(paper("mspoe", "max_ratio"), GeneValue(1.8));
  EXPECT_EQ(paper("mspoe", "alpha"), GeneValue(3.0));
  EXPECT_EQ(paper("mspoe", "first_layer"), GeneValue(2.0));
  EXPECT_EQ(paper("mspoe", "order"), GeneValue(std::string("awareness")));
  EXPECT_EQ(paper("caliope", "calibrator"), GeneValue(std::string("moses")));
  EXPECT_EQ(paper("caliope", "gap"), GeneValue(10000.0));
  EXPECT_EQ(paper("caliope", "lambda"), GeneValue(0.95));
  EXPECT_EQ(paper("phs", "scale"), GeneValue(0.0));
  EXPECT_EQ(paper("phs", "first_layer"), GeneValue(10.0));
  EXPECT_EQ(paper("phs", "last_layer"), GeneValue(25.0));
  EXPECT_EQ(phs_paper_layers(32), (std::pair<int, int>{10, 25}));
  EXPECT_EQ(phs_paper_layers(30), (std::pair<int, int>{9, 23})) << "10/32 and 25/32 of 30 layers, rounded";
  // The Ms-PoE order gene offers exactly the orders the JSON accepts.
  const auto& order = method_named("mspoe").genes.back();
  EXPECT_EQ(order.choices, mspoe_orders());
}

// Canonical text per method, pinned from the text the Intervention printed
// before the methods moved into their modules.
struct Pinned {
  const char* method;
  Intervention intervention;
  const char* canonical;
};

std::vector<Pinned> pinned() {
  std::vector<Pinned> out;
  Intervention lpes;
  lpes.rope_scale = {{1.1}, {1.25}, {1.5 + 1e-13}};
  out.push_back({"lpes", lpes, R"({"rope_scale":[[1.1],[1.25],[1.5]]})"});
  Intervention pi;
  pi.rope_scale = uniform_rope_scale(1.7);
  out.push_back({"pi", pi, R"({"rope_scale":[[1.7]]})"});
  Intervention mspoe;
  mspoe.mspoe = MsPoe{1.2, 1.8, 2, 3.0, "reference-argsort", true, 7};
  out.push_back({"mspoe", mspoe,
                 R"({"mspoe":{"alpha":3.0,"first_layer":2,"max_ratio":1.8,"min_ratio":1.2,"order":"reference-argsort","reference_spacing":true,"seed":7}})"});
  Intervention hourglass;
  hourglass.position_map = PositionMap{"hourglass", 10000, 5, 1000, 1000, 0.95};
  out.push_back({"caliope", hourglass, R"({"position_map":{"delta_max":1000.0,"delta_min":5.0,"kind":"hourglass"}})"});
  Intervention decay;
  decay.position_map = PositionMap{"decay"};
  out.push_back({"caliope", decay, R"({"position_map":{"delta0":1000.0,"kind":"decay","lambda":0.95}})"});
  Intervention moses;
  moses.position_map = PositionMap{"moses"};
  out.push_back({"caliope", moses, R"({"position_map":{"gap":10000.0,"kind":"moses"}})"});
  Intervention siw;
  siw.siw = Siw{0.8, 1.2, 1.0 / 3.0, {5, 6, 7}};
  out.push_back({"siw", siw, R"({"siw":{"alpha_dense":0.8,"alpha_sparse":1.2,"layers":[5,6,7],"sigma":0.333333333}})"});
  Intervention phs;
  phs.hidden_channel = HiddenChannel{17, -0.5, {10, 11}};
  out.push_back({"phs", phs, R"({"hidden_channel":{"channel":17,"layers":[10,11],"scale":-0.5}})"});
  Intervention temperature;
  temperature.attention_temperature = AttentionTemperature{0.8, {15, 16}};
  out.push_back({"temperature", temperature, R"({"attention_temperature":{"layers":[15,16],"temperature":0.8}})"});
  Intervention self_extend;
  self_extend.self_extend = SelfExtend{8, 1024, {0, 1}};
  out.push_back({"selfextend", self_extend, R"({"self_extend":{"group":8,"layers":[0,1],"window":1024}})"});
  Intervention string_shift;
  string_shift.string_shift = StringShift{10922, 128, {3}};
  out.push_back({"string", string_shift, R"({"string_shift":{"layers":[3],"shift":10922,"window":128}})"});
  return out;
}

TEST(MethodRegistry, CanonicalTextIsPinnedPerMethod) {
  std::set<std::string> covered;
  for (const Pinned& p : pinned()) {
    SCOPED_TRACE(p.canonical);
    EXPECT_EQ(p.intervention.canonical(), p.canonical);
    EXPECT_TRUE(method_named(p.method).is_set(p.intervention));
    covered.insert(p.method);
  }
  EXPECT_EQ(covered.size(), method_names().size()) << "every method has a pinned text";
  // Every field at once: one object, keys sorted.
  Intervention all;
  for (const Pinned& p : pinned()) {
    if (std::string(p.method) == "lpes" || std::string(p.canonical).find("hourglass") != std::string::npos ||
        std::string(p.method) == "mspoe" || std::string(p.method) == "siw" || std::string(p.method) == "phs")
      method_named(p.method).copy_field(p.intervention, all);
  }
  EXPECT_EQ(all.canonical(),
            R"({"hidden_channel":{"channel":17,"layers":[10,11],"scale":-0.5},"mspoe":{"alpha":3.0,"first_layer":2,"max_ratio":1.8,"min_ratio":1.2,"order":"reference-argsort","reference_spacing":true,"seed":7},"position_map":{"delta_max":1000.0,"delta_min":5.0,"kind":"hourglass"},"rope_scale":[[1.1],[1.25],[1.5]],"siw":{"alpha_dense":0.8,"alpha_sparse":1.2,"layers":[5,6,7],"sigma":0.333333333}})");
}

TEST(MethodRegistry, EachMethodRoundTripsThroughJson) {
  for (const Pinned& p : pinned()) {
    SCOPED_TRACE(p.canonical);
    const Intervention back = Intervention::from_json(p.intervention.to_json());
    EXPECT_EQ(back.canonical(), p.canonical);
    EXPECT_EQ(Intervention::from_json(nlohmann::json::parse(p.canonical)).canonical(), p.canonical);
  }
}

TEST(MethodRegistry, EachMethodsValidationNamesFieldAndReason) {
  Intervention lpes;
  lpes.rope_scale = std::vector<std::vector<double>>(29, {1.5});
  EXPECT_NE(validation_error(lpes).find("intervention.rope_scale: 29 rows for a model with 30 layers"), std::string::npos)
      << validation_error(lpes);
  Intervention pi;
  pi.rope_scale = uniform_rope_scale(0.0);
  EXPECT_NE(validation_error(pi).find("intervention.rope_scale[0]: 0 is not a finite number in [1e-06, 1e+06]"),
            std::string::npos)
      << validation_error(pi);
  // Scales and ratios a float engine turns into 0 or infinity are InvalidValue
  // (a server's 422 invalid_input), whether built in code or read from JSON.
  for (const double scale : {1e300, 1e-300, 1e7}) {
    pi.rope_scale = uniform_rope_scale(scale);
    EXPECT_THROW(validate_intervention(pi, kSmol), method_checks::InvalidValue) << scale;
    EXPECT_THROW(Intervention::from_json(pi.to_json()), method_checks::InvalidValue) << scale;
  }
  EXPECT_THROW(Intervention::from_json(nlohmann::json::parse(R"({"mspoe": {"max_ratio": 1e308}})")),
               method_checks::InvalidValue);
  Intervention per_head_row;
  per_head_row.rope_scale = {std::vector<double>(9, 1.5)};
  EXPECT_NE(validation_error(per_head_row).find("intervention.rope_scale: 1 rows"), std::string::npos)
      << "one row of per-head values only fits a one-layer model: " << validation_error(per_head_row);
  Intervention mspoe;
  mspoe.mspoe = MsPoe{};
  mspoe.mspoe->order = "sideways";
  EXPECT_NE(validation_error(mspoe).find("intervention.mspoe.order: 'sideways' is not one of awareness, reference-argsort"),
            std::string::npos) << validation_error(mspoe);
  Intervention caliope;
  caliope.position_map = PositionMap{"decay"};
  caliope.position_map->lambda = -0.5;
  EXPECT_NE(validation_error(caliope).find("intervention.position_map.lambda: must be >= 0"), std::string::npos)
      << validation_error(caliope);
  Intervention siw;
  siw.siw = Siw{1, 1, 1, {}};
  EXPECT_NE(validation_error(siw).find("intervention.siw.layers: must name at least one layer"), std::string::npos)
      << validation_error(siw);
  Intervention phs;
  phs.hidden_channel = HiddenChannel{3, 0.0, {30}};
  EXPECT_NE(validation_error(phs).find("intervention.hidden_channel.layers: layer 30 is outside the model's layers 0..29"),
            std::string::npos) << validation_error(phs);
  Intervention temperature;
  temperature.attention_temperature = AttentionTemperature{0.0, {3}};
  EXPECT_NE(validation_error(temperature).find("intervention.attention_temperature.temperature: 0 is not a finite"),
            std::string::npos) << validation_error(temperature);
  EXPECT_THROW(validate_intervention(temperature, kSmol), method_checks::InvalidValue);
  temperature.attention_temperature = AttentionTemperature{1.2, {}};
  EXPECT_NE(validation_error(temperature).find("intervention.attention_temperature.layers: must name at least one layer"),
            std::string::npos) << validation_error(temperature);
  EXPECT_THROW(Intervention::from_json(nlohmann::json::parse(R"({"attention_temperature": {"t": 2}})")),
               std::invalid_argument) << "an unknown key is refused";
  Intervention string_shift;
  string_shift.string_shift = StringShift{100, 128, {3}};
  EXPECT_NE(validation_error(string_shift).find("intervention.string_shift.shift: 100 is below the window 128"),
            std::string::npos)
      << validation_error(string_shift);
  EXPECT_THROW(Intervention::from_json(nlohmann::json::parse(R"({"self_extend": {"group": 0}})")),
               std::invalid_argument)
      << "a group of 0 tokens is refused";
  try {  // STRING's shift has no portable default: it must be given
    Intervention::from_json(nlohmann::json::parse(R"({"string_shift": {"window": 128, "layers": [0]}})"));
    ADD_FAILURE() << "a STRING without its shift was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("intervention.string_shift.shift: must be given"), std::string::npos)
        << e.what();
  }
  Intervention self_extend;
  self_extend.self_extend = SelfExtend{4, 512, {31}};
  EXPECT_NE(validation_error(self_extend).find("intervention.self_extend.layers: layer 31 is outside"),
            std::string::npos)
      << validation_error(self_extend);
}

// Two mechanisms that cannot act in one pass are refused together, named
// by both fields and the reason, whichever order they are set in.
TEST(MethodRegistry, MechanismsThatCannotCombineAreRefusedTogether) {
  Intervention both_remaps;
  both_remaps.self_extend = SelfExtend{4, 512, {0}};
  both_remaps.string_shift = StringShift{4096, 128, {0}};
  EXPECT_NE(validation_error(both_remaps)
                .find("intervention.self_extend (selfextend) and intervention.string_shift "
                      "(string) cannot combine: each remaps the attention's distances"),
            std::string::npos)
      << validation_error(both_remaps);
  Intervention with_siw;
  with_siw.string_shift = StringShift{4096, 128, {0}};
  with_siw.siw = Siw{};
  with_siw.siw->layers = {0};
  EXPECT_NE(validation_error(with_siw).find("cannot combine: a remapped attention is two attentions merged"),
            std::string::npos)
      << validation_error(with_siw);
  Intervention with_lpes;  // a remap and a RoPE scale compose
  with_lpes.self_extend = SelfExtend{4, 512, {0}};
  with_lpes.rope_scale = {{1.5}};
  EXPECT_NO_THROW(validate_intervention(with_lpes, kSmol));
}

TEST(MethodRegistry, GeneValuesDecodeThroughTheModule) {
  GeneValues siw("siw");
  siw.set("alpha_dense", 0.5);
  siw.set("alpha_sparse", 1.5);
  siw.set("sigma", 2.0);
  siw.set("first_layer", 3.0);
  siw.set("last_layer", 5.0);
  Intervention out;
  method_named("siw").apply_genes(siw, out);
  ASSERT_TRUE(out.siw);
  EXPECT_EQ(*out.siw, (Siw{0.5, 1.5, 2.0, {3, 4, 5}}));
  EXPECT_EQ(intervention_fields_set(out), std::vector<std::string>{"siw"});
  GeneValues temperature("temperature");
  temperature.set("temperature", 0.9);
  temperature.set("first_layer", 15.0);
  temperature.set("last_layer", 17.0);
  method_named("temperature").apply_genes(temperature, out);
  ASSERT_TRUE(out.attention_temperature);
  EXPECT_EQ(*out.attention_temperature, (AttentionTemperature{0.9, {15, 16, 17}}));
}

TEST(MethodRegistry, RopeScaleExpandsPerLayerAndHead) {
  const RopeScale per_layer = rope_scale_per_layer({1.0, 2.0});
  EXPECT_EQ(rope_scales_per_head(per_layer, 2, 3), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(rope_scales_per_head(uniform_rope_scale(1.5), 2, 2), (std::vector<float>{1.5, 1.5, 1.5, 1.5}));
  EXPECT_EQ(rope_scales_per_head({}, 1, 2), (std::vector<float>{1, 1}));
  EXPECT_EQ(rope_scales_per_head({{1, 2}, {3, 4}}, 2, 2), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace midtune
