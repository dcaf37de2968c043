// Internal: one parser per section of the experiment file. Each validates
// its own keys and leaves cross-section rules to parse_experiment.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/experiment/experiment.hpp"
#include "core/experiment/yaml_reader.hpp"

namespace midtune::load {

using yaml_reader::Field;
using yaml_reader::MapReader;

// `~`, `~/x` and paths relative to `base_dir` (the experiment's folder),
// made absolute and normal.
std::filesystem::path resolve_path(const Field& field, const std::filesystem::path& base_dir);

BackendConfig parse_backend(const MapReader& root, const std::filesystem::path& base_dir);
DatasetConfig parse_dataset(const MapReader& root, const std::filesystem::path& base_dir);
ObjectiveConfig parse_objective(const MapReader& root, const DatasetConfig& dataset);
SearchConfig parse_search(const MapReader& root, const ObjectiveConfig& objective, const DatasetConfig& dataset);
MethodGenes parse_method_genes(const MapReader& objective, const std::string& method);

// The gene names a grid may list for this objective (combo: method.gene);
// empty when the objective's genes are unnamed (LPES brute-force).
std::optional<std::vector<std::string>> objective_gene_names(const ObjectiveConfig& objective);
// The schema of a gene of a gene-table method (combo: method.gene);
// nullptr for LPES / PI genes, which are plain numbers.
const GeneSchema* objective_gene_schema(const ObjectiveConfig& objective, const std::string& gene);
// A gene value checked against its schema (type, bounds, choices).
GeneValue parse_gene_value(const Field& field, const GeneSchema& schema);

}  // namespace midtune::load
