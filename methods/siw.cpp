#include "methods/siw.hpp"

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

// SIW's paper gives no alpha/sigma (1 is the plain model) and its layer range
// has no portable default: the experiment sets it.
std::vector<GeneSchema> genes() {
  const Siw plain;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      {"alpha_dense", GeneType::real, plain.alpha_dense, 0, 10, {}, "initial-token weight factor in dense areas"},
      {"alpha_sparse", GeneType::real, plain.alpha_sparse, 0, 10, {}, "initial-token weight factor elsewhere"},
      {"sigma", GeneType::real, plain.sigma, 0, 100, {}, "dense chunk threshold (x mean count)"},
      {"first_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "first layer with SIW"},
      {"last_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "last layer with SIW"},
  };
}

}  // namespace

json siw_to_json(const Siw& siw) {
  return {{"alpha_dense", siw.alpha_dense}, {"alpha_sparse", siw.alpha_sparse}, {"sigma", siw.sigma},
          {"layers", siw.layers}};
}

Siw siw_from_json(const json& m) {
  check::reject_unknown(m, "siw", {"alpha_dense", "alpha_sparse", "sigma", "layers"});
  Siw s;
  s.alpha_dense = check::number(m, "siw.alpha_dense", s.alpha_dense);
  s.alpha_sparse = check::number(m, "siw.alpha_sparse", s.alpha_sparse);
  s.sigma = check::number(m, "siw.sigma", s.sigma);
  s.layers = check::layer_list(m, "siw.layers");
  if (s.alpha_dense < 0 || s.alpha_sparse < 0) check::bad("siw", "alphas must be >= 0");
  return s;
}

void validate_siw(const Siw& siw, const ModelShape& model) {
  check::check_at_least(siw.alpha_dense, 0, "siw.alpha_dense");
  check::check_at_least(siw.alpha_sparse, 0, "siw.alpha_sparse");
  check::check_at_least(siw.sigma, 0, "siw.sigma");
  check::check_layer_list(siw.layers, "siw.layers", model);
}

Siw siw_from_genes(const GeneValues& genes) {
  Siw s;
  s.alpha_dense = genes.number("alpha_dense");
  s.alpha_sparse = genes.number("alpha_sparse");
  s.sigma = genes.number("sigma");
  s.layers = check::gene_layer_range(genes);
  return s;
}

const MethodModule& siw_method() {
  static const MethodModule module = [] {
    MethodModule m = optional_field_method<Siw>(
        "siw", "siw", Mechanism::key0_weight, &Intervention::siw, genes(), {{"first_layer", "last_layer"}},
        {siw_to_json, siw_from_json, validate_siw, siw_from_genes}, Siw{.layers = {0}});
    m.paper_gives_setting = false;  // the alphas are tuned per model
    return m;
  }();
  return module;
}

}  // namespace midtune
