#include "objectives/gene_table.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace midtune {
namespace {

GeneValue from_json_value(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.get<double>();
}

bool is_layer_gene(const std::string& name) { return name == "first_layer" || name == "last_layer"; }

double largest_value(const GeneRange& r) {
  if (!r.listed) return r.max;
  double top = -1e300;
  for (const auto& v : r.values) {
    if (const auto* d = std::get_if<double>(&v)) top = std::max(top, *d);
  }
  return top;
}

}  // namespace

GeneTable::GeneTable(const ObjectiveConfig& objective, const std::string& method, int layers)
    : method_(method), module_(&method_named(method)), layers_(layers) {
  const std::string where = "objective." + method + ".genes";
  if (!module_->has_gene_table()) throw std::invalid_argument("objective: '" + method + "' has no gene table");
  const MethodGenes* table = objective.genes_of(method);
  if (table == nullptr) throw std::invalid_argument(where + ": missing (the " + method + " objective needs its genes)");
  all_ = table->genes;
  for (const GeneRange& r : table->genes) {
    if (is_layer_gene(r.name) && largest_value(r) > layers - 1) {
      throw std::invalid_argument(where + "." + r.name + ": layer " + gene_value_to_string(largest_value(r)) +
                                  " is outside the model's layers 0.." + std::to_string(layers - 1));
    }
    if (r.fixed()) {
      fixed_.push_back(r);
      continue;
    }
    const std::string& name = r.name;
    if (r.listed) {
      CategoricalGene gene{name, {}};
      for (const auto& v : r.values) gene.values.push_back(gene_value_to_json(v));
      const auto pos = std::find(r.values.begin(), r.values.end(), r.start);
      if (pos == r.values.end()) throw std::invalid_argument(where + "." + r.name + ": start is not one of the values");
      start_.push_back(static_cast<double>(pos - r.values.begin()));
      genes_.push_back(std::move(gene));
    } else {
      FloatGene gene{name, r.min, r.max, r.step};
      try {
        validate_gene(gene);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + "." + r.name + ": " + e.what());
      }
      start_.push_back(snap(gene, std::get<double>(r.start)));
      genes_.push_back(std::move(gene));
    }
    gene_names_.push_back(r.name);
  }
}

GeneValues GeneTable::values(std::span<const double> slice) const {
  if (slice.size() != genes_.size()) throw std::logic_error(method_ + ": genome slice of the wrong size");
  GeneValues out(method_);
  for (const GeneRange& r : fixed_) out.set(r.name, r.listed ? r.values.front() : GeneValue(r.min));
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    if (const auto* c = std::get_if<CategoricalGene>(&genes_[i])) {
      out.set(gene_names_[i], from_json_value(c->values.at(static_cast<std::size_t>(slice[i]))));
    } else {
      out.set(gene_names_[i], slice[i]);
    }
  }
  return out;
}

GeneValues GeneTable::paper_values() const {
  GeneValues out(method_);
  const std::vector<GeneSchema>& schemas = module_->genes;
  for (const GeneRange& r : all_) {
    const auto schema = std::find_if(schemas.begin(), schemas.end(), [&](const GeneSchema& s) { return s.name == r.name; });
    const bool has_paper = schema != schemas.end() && schema->paper_default.has_value();
    GeneValue value = has_paper   ? *schema->paper_default
                      : r.fixed() ? (r.listed ? r.values.front() : GeneValue(r.min))
                                  : r.start;
    // A paper's layer at the same depth fraction of this model (PHS: layers
    // 10-25 of 32 are 8-19 of 24).
    if (has_paper && schema->paper_model_layers > 0) {
      value = static_cast<double>(
          paper_layer_for_depth(static_cast<int>(std::get<double>(value)), schema->paper_model_layers, layers_));
    }
    out.set(r.name, value);
  }
  return out;
}

bool GeneTable::ordered(std::span<const double> slice) const {
  const GeneValues v = values(slice);
  for (const GeneOrder& order : module_->orders) {
    if (v.number(order.lower) > v.number(order.upper)) return false;
  }
  return true;
}

namespace {

class GeneTableObjective final : public Objective {
 public:
  GeneTableObjective(GeneTable table, const FitnessWeights& weights)
      : table_(std::move(table)), weights_{weights.beginning, weights.middle, weights.end} {
    space_ = GenomeSpace(table_.genes(), [this](const Genome& g) { return table_.ordered(g); },
                         ordering_text(table_.method()));
    space_.set_seed(table_.start());
  }
  std::string name() const override { return table_.method(); }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& genome) const override {
    space_.require_valid(genome, table_.method() + " genome");
    Intervention out;
    table_.apply(genome, out);
    return out;
  }
  // Fitness as LPES: lambda_B acc(beginning) + lambda_M acc(middle) + lambda_E acc(end).
  double fitness(const std::vector<metrics::PositionAccuracy>& by_position) const override {
    return metrics::bucket_fitness(by_position, weights_);
  }
  std::optional<Intervention> paper_default() const override {
    if (!table_.paper_gives_setting()) return std::nullopt;
    Intervention out;
    table_.apply_paper_values(out);
    return out;
  }
  static std::string ordering_text(const std::string& method) {
    std::string text;
    for (const GeneOrder& o : method_named(method).orders) text += (text.empty() ? "" : ", ") + o.lower + " <= " + o.upper;
    return text;
  }

 private:
  GeneTable table_;
  metrics::BucketWeights weights_;
  GenomeSpace space_;
};

}  // namespace

std::unique_ptr<Objective> make_gene_table_objective(const ObjectiveConfig& objective, const std::string& method,
                                                     int layers) {
  return std::make_unique<GeneTableObjective>(GeneTable(objective, method, layers), objective.weights);
}

}  // namespace midtune
