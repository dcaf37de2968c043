// Two or more methods in one genome, e.g. an LPES curve plus
// SIW's alphas, which none of the papers searched jointly. Member genes are
// named "method.gene"; each member decodes its slice and the Interventions
// are merged (members touch disjoint fields: lpes and pi cannot be combined).
#include <stdexcept>

#include "objectives/gene_table.hpp"

namespace midtune {
namespace {

Gene renamed(Gene gene, const std::string& prefix) {
  std::visit([&](auto& g) { g.name = prefix + "." + g.name; }, gene);
  return gene;
}

void merge_into(const Intervention& part, Intervention& out) {
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(part)) m->copy_field(part, out);
  }
}

// One member: either a whole objective (lpes, pi: bespoke genomes) or a gene table.
struct Member {
  std::string method;
  std::unique_ptr<Objective> objective;  // lpes | pi
  std::unique_ptr<GeneTable> table;      // gene-table methods
  std::size_t offset = 0;
  std::size_t size = 0;
};

class ComboObjective final : public Objective {
 public:
  ComboObjective(const ObjectiveConfig& config, int layers)
      : weights_{config.weights.beginning, config.weights.middle, config.weights.end} {
    if (config.combo.size() < 2) throw std::invalid_argument("objective.combo.methods: needs at least two methods");
    std::vector<Gene> genes;
    Genome seed;
    for (const std::string& method : config.combo) {
      Member m;
      m.method = method;
      std::vector<Gene> own;
      if (!method_named(method).has_gene_table()) {
        m.objective = method == "lpes" ? make_lpes_objective(config, layers) : make_pi_objective(config);
        own = m.objective->space().genes();
        const Genome start = m.objective->initial_genome();
        seed.insert(seed.end(), start.begin(), start.end());
      } else {
        m.table = std::make_unique<GeneTable>(config, method, layers);
        own = m.table->genes();
        seed.insert(seed.end(), m.table->start().begin(), m.table->start().end());
      }
      m.offset = genes.size();
      m.size = own.size();
      for (Gene& g : own) genes.push_back(renamed(std::move(g), method));
      members_.push_back(std::move(m));
    }
    space_ = GenomeSpace(genes, [this](const Genome& g) { return members_valid(g); },
                         "each member's own constraints");
    space_.set_seed(seed);
  }
  std::string name() const override { return "combo"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& genome) const override {
    space_.require_valid(genome, "combo genome");
    Intervention out;
    for (const Member& m : members_) {
      const std::span<const double> slice(genome.data() + m.offset, m.size);
      if (m.objective) {
        merge_into(m.objective->decode(Genome(slice.begin(), slice.end())), out);
      } else {
        m.table->apply(slice, out);
      }
    }
    return out;
  }
  double fitness(const std::vector<metrics::PositionAccuracy>& by_position) const override {
    return metrics::bucket_fitness(by_position, weights_);
  }
  // The gene-table members at their papers' values; LPES / PI members, and
  // members whose paper gives no setting (SIW), are left out (the plain
  // model's part); none left, no row.
  std::optional<Intervention> paper_default() const override {
    Intervention out;
    for (const Member& m : members_) {
      if (m.table && m.table->paper_gives_setting()) m.table->apply_paper_values(out);
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

 private:
  bool members_valid(const Genome& genome) const {
    for (const Member& m : members_) {
      const std::span<const double> slice(genome.data() + m.offset, m.size);
      if (m.objective ? !m.objective->space().satisfies_predicate(Genome(slice.begin(), slice.end()))
                      : !m.table->ordered(slice)) {
        return false;
      }
    }
    return true;
  }
  metrics::BucketWeights weights_;
  std::vector<Member> members_;
  GenomeSpace space_;
};

}  // namespace

std::unique_ptr<Objective> make_combo_objective(const ObjectiveConfig& objective, int layers) {
  return std::make_unique<ComboObjective>(objective, layers);
}

}  // namespace midtune
