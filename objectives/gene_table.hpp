// Objectives built from a method's gene table (core/experiment/genes.hpp):
// mspoe, siw, caliope, phs. The searched genes (those with more than one
// value) form the genome; fixed genes stay constants. Each method supplies
// one function that writes its part of the Intervention from gene values.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "objectives/objective.hpp"

namespace midtune {

// The value of every gene of one method for one genome.
class GeneValues {
 public:
  explicit GeneValues(std::string method) : method_(std::move(method)) {}
  void set(const std::string& name, GeneValue value) { values_[name] = std::move(value); }
  // Throws std::logic_error naming the method and gene when absent or of the other type.
  double number(const std::string& name) const;
  int integer(const std::string& name) const;
  const std::string& text(const std::string& name) const;

 private:
  const GeneValue& at(const std::string& name) const;
  std::string method_;
  std::map<std::string, GeneValue> values_;
};

// Writes the method's part of the Intervention.
using ApplyGenes = std::function<void(const GeneValues&, Intervention&)>;

// One method's genes as a piece of a genome (combo.cpp prefixes the names).
class GeneTable {
 public:
  // Throws std::invalid_argument "objective.<method>.genes: ..." when the
  // file gave no table or a layer gene exceeds the model's layers.
  GeneTable(const ObjectiveConfig& objective, const std::string& method, int layers);
  const std::string& method() const { return method_; }
  const std::vector<Gene>& genes() const { return genes_; }
  const Genome& start() const { return start_; }
  // Gene values from this table's slice of a genome.
  GeneValues values(std::span<const double> slice) const;
  // The method's ordered pairs (min_ratio <= max_ratio, ...) hold.
  bool ordered(std::span<const double> slice) const;
  // Every gene at its paper default (core/experiment/genes.cpp), or at the
  // experiment's start value where the paper gives none; may lie outside the
  // searched range.
  GeneValues paper_values() const;

 private:
  std::string method_;
  std::vector<Gene> genes_;
  std::vector<std::string> gene_names_;  // unprefixed, parallel to genes_
  std::vector<GeneRange> fixed_;
  std::vector<GeneRange> all_;  // the experiment's table, every gene
  Genome start_;
};

// A single-method objective over a gene table.
std::unique_ptr<Objective> make_gene_table_objective(const ObjectiveConfig& objective, const std::string& method,
                                                     int layers, ApplyGenes apply);

// Per-method writers (mspoe.cpp, siw.cpp, caliope.cpp, phs.cpp).
void apply_mspoe_genes(const GeneValues& genes, Intervention& out);
void apply_siw_genes(const GeneValues& genes, Intervention& out);
void apply_caliope_genes(const GeneValues& genes, Intervention& out);
void apply_phs_genes(const GeneValues& genes, Intervention& out);
// The writer of a gene-table method; throws std::invalid_argument for another name.
ApplyGenes gene_writer(const std::string& method);

}  // namespace midtune
