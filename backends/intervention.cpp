#include "backends/intervention.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "backends/backend.hpp"

namespace midtune {
namespace {

using nlohmann::json;

// Fields are checked by hand so that an error names the field and the reason.
[[noreturn]] void bad(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("intervention." + field + ": " + reason);
}

void reject_unknown(const json& j, const std::string& where,
                    std::initializer_list<const char*> known) {
  if (!j.is_object()) bad(where, "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) bad(where.empty() ? it.key() : where + "." + it.key(), "unknown field");
  }
}

double number(const json& j, const std::string& field, double fallback) {
  if (!j.contains(field.substr(field.rfind('.') + 1))) return fallback;
  const json& v = j.at(field.substr(field.rfind('.') + 1));
  if (!v.is_number()) bad(field, "must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) bad(field, "must be finite");
  return d;
}

std::vector<int> int_list(const json& j, const std::string& field) {
  std::vector<int> out;
  const std::string key = field.substr(field.rfind('.') + 1);
  if (!j.contains(key)) return out;
  if (!j.at(key).is_array()) bad(field, "must be a list of layer indices");
  for (const json& v : j.at(key)) {
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000)
      bad(field, "entries must be integer layer indices >= 0");
    out.push_back(v.get<int>());
  }
  return out;
}

// Round to 9 significant digits so that two interventions that act the same
// (up to float noise from decoding) print the same canonical text.
double canonical_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return std::strtod(buf, nullptr);
}

json canonicalise(const json& j) {
  if (j.is_number_float()) return canonical_number(j.get<double>());
  if (j.is_array() || j.is_object()) {
    json out = j;
    for (auto& v : out) v = canonicalise(v);
    return out;
  }
  return j;
}

}  // namespace

double Intervention::scale_for(int layer, int head) const {
  if (rope_scale.empty()) return 1.0;
  const auto& row = rope_scale.size() == 1 ? rope_scale[0] : rope_scale.at(static_cast<size_t>(layer));
  if (row.size() == 1) return row[0];
  return row.at(static_cast<size_t>(head));
}

json Intervention::to_json() const {
  json j = json::object();
  if (!rope_scale.empty()) j["rope_scale"] = rope_scale;
  if (mspoe) {
    j["mspoe"] = {{"min_ratio", mspoe->min_ratio}, {"max_ratio", mspoe->max_ratio},
                  {"first_layer", mspoe->first_layer}, {"alpha", mspoe->alpha},
                  {"order", mspoe->order}, {"reference_spacing", mspoe->reference_spacing},
                  {"seed", mspoe->seed}};
  }
  if (position_map) {
    const auto& p = *position_map;
    json pm = {{"kind", p.kind}};
    if (p.kind == "moses") pm["gap"] = p.gap;
    if (p.kind == "hourglass") { pm["delta_min"] = p.delta_min; pm["delta_max"] = p.delta_max; }
    if (p.kind == "decay") { pm["delta0"] = p.delta0; pm["lambda"] = p.lambda; }
    j["position_map"] = pm;
  }
  if (siw) {
    j["siw"] = {{"alpha_dense", siw->alpha_dense}, {"alpha_sparse", siw->alpha_sparse},
                {"sigma", siw->sigma}, {"layers", siw->layers}};
  }
  if (hidden_channel) {
    j["hidden_channel"] = {{"channel", hidden_channel->channel},
                           {"scale", hidden_channel->scale},
                           {"layers", hidden_channel->layers}};
  }
  return j;
}

Intervention Intervention::from_json(const json& j) {
  reject_unknown(j, "", {"rope_scale", "mspoe", "position_map", "siw", "hidden_channel"});
  Intervention iv;
  if (j.contains("rope_scale")) {
    const json& rs = j.at("rope_scale");
    if (!rs.is_array()) bad("rope_scale", "must be a list of per-layer lists");
    for (size_t l = 0; l < rs.size(); ++l) {
      const std::string field = "rope_scale[" + std::to_string(l) + "]";
      if (!rs[l].is_array() || rs[l].empty()) bad(field, "must be a non-empty list of scales");
      std::vector<double> row;
      for (const json& v : rs[l]) {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
          bad(field, "scales must be finite numbers > 0");
        row.push_back(v.get<double>());
      }
      iv.rope_scale.push_back(std::move(row));
    }
  }
  if (j.contains("mspoe")) {
    const json& m = j.at("mspoe");
    reject_unknown(m, "mspoe", {"min_ratio", "max_ratio", "first_layer", "alpha", "order",
                                "reference_spacing", "seed"});
    MsPoe p;
    p.min_ratio = number(m, "mspoe.min_ratio", p.min_ratio);
    p.max_ratio = number(m, "mspoe.max_ratio", p.max_ratio);
    p.alpha = number(m, "mspoe.alpha", p.alpha);
    if (m.contains("first_layer")) {
      const json& v = m.at("first_layer");
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000)
        bad("mspoe.first_layer", "must be an integer layer index >= 0");
      p.first_layer = v.get<int>();
    }
    if (m.contains("order")) {
      if (!m["order"].is_string()) bad("mspoe.order", "must be a string");
      p.order = m["order"].get<std::string>();
    }
    if (m.contains("reference_spacing")) {
      if (!m["reference_spacing"].is_boolean()) bad("mspoe.reference_spacing", "must be true or false");
      p.reference_spacing = m["reference_spacing"].get<bool>();
    }
    if (m.contains("seed")) {
      if (!m["seed"].is_number_unsigned()) bad("mspoe.seed", "must be an integer >= 0");
      p.seed = m["seed"].get<std::uint64_t>();
    }
    if (p.min_ratio <= 0) bad("mspoe.min_ratio", "must be > 0");
    if (p.min_ratio > p.max_ratio) bad("mspoe", "min_ratio must be <= max_ratio");
    static const char* orders[] = {"awareness", "reference-argsort", "sequential", "random", "entropy"};
    bool known = false;
    for (const char* o : orders) known = known || p.order == o;
    if (!known) bad("mspoe.order", "'" + p.order + "' is not one of awareness, reference-argsort, sequential, random, entropy");
    iv.mspoe = p;
  }
  if (j.contains("position_map")) {
    const json& m = j.at("position_map");
    reject_unknown(m, "position_map", {"kind", "gap", "delta_min", "delta_max", "delta0", "lambda"});
    PositionMap p;
    if (!m.contains("kind") || !m["kind"].is_string()) bad("position_map.kind", "missing (moses | hourglass | decay)");
    p.kind = m["kind"].get<std::string>();
    if (p.kind != "moses" && p.kind != "hourglass" && p.kind != "decay")
      bad("position_map.kind", "'" + p.kind + "' is not one of moses, hourglass, decay");
    p.gap = number(m, "position_map.gap", p.gap);
    p.delta_min = number(m, "position_map.delta_min", p.delta_min);
    p.delta_max = number(m, "position_map.delta_max", p.delta_max);
    p.delta0 = number(m, "position_map.delta0", p.delta0);
    p.lambda = number(m, "position_map.lambda", p.lambda);
    iv.position_map = p;
  }
  if (j.contains("siw")) {
    const json& m = j.at("siw");
    reject_unknown(m, "siw", {"alpha_dense", "alpha_sparse", "sigma", "layers"});
    Siw s;
    s.alpha_dense = number(m, "siw.alpha_dense", s.alpha_dense);
    s.alpha_sparse = number(m, "siw.alpha_sparse", s.alpha_sparse);
    s.sigma = number(m, "siw.sigma", s.sigma);
    s.layers = int_list(m, "siw.layers");
    if (s.alpha_dense < 0 || s.alpha_sparse < 0) bad("siw", "alphas must be >= 0");
    iv.siw = s;
  }
  if (j.contains("hidden_channel")) {
    const json& m = j.at("hidden_channel");
    reject_unknown(m, "hidden_channel", {"channel", "scale", "layers"});
    HiddenChannel h;
    if (!m.contains("channel") || !m["channel"].is_number_integer() || m["channel"].get<long long>() < 0 ||
        m["channel"].get<long long>() > 1000000)
      bad("hidden_channel.channel", "missing or not an integer >= 0");
    h.channel = m["channel"].get<int>();
    h.scale = number(m, "hidden_channel.scale", h.scale);
    h.layers = int_list(m, "hidden_channel.layers");
    iv.hidden_channel = h;
  }
  return iv;
}

std::string Intervention::canonical() const { return canonicalise(to_json()).dump(); }

std::string fnv1a_hex(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json ModelIdentity::to_json() const {
  return {{"name", name}, {"architecture", architecture}, {"layers", layers}, {"heads", heads},
          {"kv_heads", kv_heads}, {"hidden", hidden}, {"tokenizer_hash", tokenizer_hash}};
}

std::string ModelIdentity::key() const { return to_json().dump(); }

const char* to_string(Mode mode) { return mode == Mode::generate ? "generate" : "teacher_forced"; }

Mode mode_from_string(const std::string& text) {
  if (text == "generate") return Mode::generate;
  if (text == "teacher_forced") return Mode::teacher_forced;
  throw std::invalid_argument("metric '" + text + "' is not one of generate, teacher_forced");
}

}  // namespace midtune
