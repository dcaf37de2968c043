// Objectives built from a method's gene table (the schema in its module,
// methods/<method>.cpp; the ranges from the experiment): mspoe, siw,
// caliope, phs. The searched genes (those with more than one value) form the
// genome; fixed genes stay constants. The method's module writes its part of
// the Intervention from the gene values (MethodModule::apply_genes).
#pragma once

#include <memory>
#include <string>
#include <span>
#include <vector>

#include "objectives/objective.hpp"
#include "methods/registry.hpp"

namespace midtune {

// One method's genes as a piece of a genome (combo.cpp prefixes the names).
class GeneTable {
 public:
  // Throws std::invalid_argument "objective.<method>.genes: ..." when the
  // file gave no table or a layer gene exceeds the model's layers.
  GeneTable(const ObjectiveConfig& objective, const std::string& method, int layers);
  const std::string& method() const { return method_; }
  // The method's part of the Intervention from this table's slice of a genome.
  void apply(std::span<const double> slice, Intervention& out) const { module_->apply_genes(values(slice), out); }
  void apply_paper_values(Intervention& out) const { module_->apply_genes(paper_values(), out); }
  // Whether the method's paper gives a setting (MethodModule::paper_gives_setting).
  bool paper_gives_setting() const { return module_->paper_gives_setting; }
  const std::vector<Gene>& genes() const { return genes_; }
  const Genome& start() const { return start_; }
  // Gene values from this table's slice of a genome.
  GeneValues values(std::span<const double> slice) const;
  // The method's ordered pairs (min_ratio <= max_ratio, ...) hold.
  bool ordered(std::span<const double> slice) const;
  // Every gene at its paper default (the method's module), or at the
  // experiment's start value where the paper gives none; may lie outside the
  // searched range. A paper's layer of a model of another depth is taken at
  // the same depth fraction of this one (GeneSchema::paper_model_layers).
  GeneValues paper_values() const;

 private:
  std::string method_;
  const MethodModule* module_;
  int layers_;  // the model's
  std::vector<Gene> genes_;
  std::vector<std::string> gene_names_;  // unprefixed, parallel to genes_
  std::vector<GeneRange> fixed_;
  std::vector<GeneRange> all_;  // the experiment's table, every gene
  Genome start_;
};

// A single-method objective over the gene table of `method` (a registry
// method with a gene table; its module decodes the gene values).
std::unique_ptr<Objective> make_gene_table_objective(const ObjectiveConfig& objective, const std::string& method,
                                                     int layers);

}  // namespace midtune
