// The search section: strategy and the settings of ga, grid and random.
#include <algorithm>
#include <cmath>

#include "core/experiment/load_sections.hpp"
#include "core/experiment/nearest_name.hpp"

namespace midtune::load {
namespace {

constexpr std::int64_t kMaxCount = 1000000;
const std::vector<std::string> kGaKeys = {
    "population", "parents",  "generations", "mutants",   "crossovers",      "crossover_tries",
    "mutation_x", "mutation_y", "mutation",  "crossover", "selection",       "tournament_size",
    "elitism", "patience"};
const std::vector<std::string> kNsga2Keys = {"population", "generations", "mutation", "crossover", "crossover_tries"};

int count_or(const MapReader& section, const std::string& key, int fallback, std::int64_t min,
             std::int64_t max) {
  return static_cast<int>(section.integer_or(key, fallback, min, max));
}

GaConfig parse_ga(const MapReader& search) {
  const MapReader section = search.map("ga", kGaKeys);
  GaConfig ga;
  ga.population = count_or(section, "population", ga.population, 2, kMaxCount);
  ga.parents = count_or(section, "parents", ga.parents, 1, kMaxCount);
  if (ga.parents > ga.population) {
    section.field(section.has("parents") ? "parents" : "population")
        .fail("population (" + std::to_string(ga.population) + ") must be >= parents (" +
              std::to_string(ga.parents) + ")");
  }
  ga.generations = count_or(section, "generations", ga.generations, 1, kMaxCount);
  ga.mutants = count_or(section, "mutants", ga.mutants, 0, kMaxCount);
  ga.crossovers = count_or(section, "crossovers", ga.crossovers, 0, kMaxCount);
  // LPES Algorithm 1: next population = N_pa parents + N_cr children + N_mu mutants.
  if (ga.parents + ga.crossovers + ga.mutants != ga.population) {
    section.field("population")
        .fail("population (" + std::to_string(ga.population) +
              ") must equal parents + crossovers + mutants (" + std::to_string(ga.parents) + " + " +
              std::to_string(ga.crossovers) + " + " + std::to_string(ga.mutants) + ")");
  }
  if (ga.crossovers > 0 && ga.parents < 2) {
    section.field("parents").fail("crossovers need at least 2 parents");
  }
  ga.crossover_tries = count_or(section, "crossover_tries", ga.crossover_tries, 1, 1000);
  ga.mutation_x = count_or(section, "mutation_x", ga.mutation_x, 0, 1023);
  ga.mutation_y = section.number_or("mutation_y", ga.mutation_y, 0, 100);
  ga.mutation = section.choice_or("mutation", ga.mutation, {"lpes", "uniform", "gaussian", "polynomial"});
  ga.crossover = section.choice_or("crossover", ga.crossover, {"one-point", "uniform", "sbx"});
  ga.selection = section.choice_or("selection", ga.selection, {"truncation", "tournament"});
  ga.tournament_size = count_or(section, "tournament_size", ga.tournament_size, 2,
                              ga.selection == "tournament" ? ga.population : kMaxCount);
  ga.elitism = count_or(section, "elitism", ga.elitism, 0, ga.parents);
  ga.patience = count_or(section, "patience", ga.patience, 0, ga.generations);
  return ga;
}

Nsga2SearchConfig parse_nsga2(const MapReader& search) {
  const MapReader section = search.map("nsga2", kNsga2Keys);
  Nsga2SearchConfig nsga2;
  nsga2.population = count_or(section, "population", nsga2.population, 2, kMaxCount);
  nsga2.generations = count_or(section, "generations", nsga2.generations, 1, kMaxCount);
  nsga2.mutation = section.choice_or("mutation", nsga2.mutation, {"polynomial", "gaussian", "uniform"});
  nsga2.crossover = section.choice_or("crossover", nsga2.crossover, {"sbx", "one-point", "uniform"});
  nsga2.crossover_tries = count_or(section, "crossover_tries", nsga2.crossover_tries, 1, 1000);
  return nsga2;
}

std::vector<std::string> parse_objectives(const MapReader& search, const DatasetConfig& dataset) {
  const Field field = search.required("objectives");
  const std::vector<Field> items = field.list_of_min_size(2);
  if (items.size() > 3) field.fail("list two or three objectives, not " + std::to_string(items.size()));
  std::vector<std::string> names;
  for (const Field& item : items) {
    const std::string name = item.choice(search_objectives());
    if (std::find(names.begin(), names.end(), name) != names.end()) item.fail(name + " is listed twice");
    if (name.rfind("logprob_", 0) == 0 && dataset.metric != "teacher_forced")
      item.fail(name + " reads the teacher-forced gold log-probability; dataset.metric is " + dataset.metric);
    if (name.find("_middle") != std::string::npos && dataset.gold_positions.size() < 3)
      item.fail(name + " needs a middle position; dataset.gold_positions has " +
                std::to_string(dataset.gold_positions.size()));
    names.push_back(name);
  }
  return names;
}

// A grid value of a gene without a schema: a number, or text when it is not one.
GeneValue plain_gene_value(const Field& item) {
  double number = 0;
  if (item.is_scalar() && YAML::convert<double>::decode(item.node(), number) && std::isfinite(number)) {
    return number;
  }
  return item.text();
}

std::vector<GridAxis> parse_grid(const MapReader& search, const ObjectiveConfig& objective, bool active) {
  const MapReader section = search.map("grid", {"values"});
  if (!active && !section.has("values")) return {};
  const Field values_field = section.required("values");
  if (!values_field.is_map()) {
    values_field.fail("expected a mapping of gene name to a list of values, got " +
                      values_field.kind_name());
  }
  // Unnamed genes (LPES brute-force) accept any name; otherwise only the
  // objective's genes. An inactive grid (another strategy runs) is only
  // checked for shape, so one file can carry settings for several strategies.
  const std::optional<std::vector<std::string>> gene_names =
      active ? objective_gene_names(objective) : std::nullopt;
  const MapReader values = gene_names ? MapReader(values_field, *gene_names) : MapReader(values_field);
  std::vector<GridAxis> grid;
  for (const auto& gene : values.keys()) {
    GridAxis axis;
    axis.gene = gene;
    const GeneSchema* schema = active ? objective_gene_schema(objective, gene) : nullptr;
    for (const auto& item : values.field(gene).list_of_min_size(1)) {
      GeneValue value = schema != nullptr ? parse_gene_value(item, *schema)
                        : active          ? GeneValue(item.number())  // LPES / PI genes
                                          : plain_gene_value(item);
      if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end()) {
        item.fail("duplicate value " + gene_value_to_string(value));
      }
      axis.values.push_back(std::move(value));
    }
    grid.push_back(std::move(axis));
  }
  if (grid.empty()) values_field.fail("list at least one gene with its values");
  // Canonical axis order (by gene name), as in the JSON forms, so reordering
  // the file changes neither the enumeration nor the fingerprint.
  std::sort(grid.begin(), grid.end(),
            [](const GridAxis& a, const GridAxis& b) { return a.gene < b.gene; });
  return grid;
}

// Racing needs parent places that the best candidates take: ga with
// truncation selection carrying its whole parent pool (elitism 0).
std::optional<RacingConfig> parse_racing(const MapReader& search, const SearchConfig& config,
                                         const DatasetConfig& dataset) {
  if (!search.has("racing")) return std::nullopt;
  const MapReader section = search.map("racing", {"first", "step", "confidence"});
  if (config.strategy != "ga")
    section.self().fail("applies to strategy ga only (a generation races for the parent places the next one "
                        "keeps; " + config.strategy + " keeps no such places)");
  if (config.ga.selection != "truncation")
    section.self().fail("needs search.ga.selection: truncation (a tournament may pick any member as a parent, so "
                        "there are no places that only the best can take)");
  if (config.ga.elitism != 0)
    section.self().fail("needs search.ga.elitism: 0 (Algorithm 1 carries the whole parent pool; with elitism a "
                        "child need not beat a carried parent to become one)");
  RacingConfig racing;
  racing.first = static_cast<int>(section.required("first").integer_in(1, kMaxCount));
  if (racing.first >= dataset.search_samples)
    section.field("first").fail("must be below dataset.search_samples (" + std::to_string(dataset.search_samples) +
                                "): a first slice of the whole split races nothing");
  racing.step = static_cast<int>(section.required("step").integer_in(1, kMaxCount));
  if (section.has("confidence")) {
    const Field field = section.field("confidence");
    racing.confidence = field.number();
    if (!(racing.confidence > 0.5 && racing.confidence < 1.0))
      field.fail("must lie strictly between 0.5 and 1 (one minus the chance of wrongly dropping a child), got " +
                 field.text());
  }
  return racing;
}

}  // namespace

SearchConfig parse_search(const MapReader& root, const ObjectiveConfig& objective, const DatasetConfig& dataset) {
  const MapReader section =
      root.map("search", {"strategy", "ga", "grid", "random", "nsga2", "objectives", "unique_children", "racing"},
               {{"ga", kGaKeys}, {"random", {"samples"}}, {"nsga2", kNsga2Keys},
                {"racing", {"first", "step", "confidence"}}});
  SearchConfig search;
  search.strategy = section.choice_or("strategy", search.strategy, search_strategies());
  search.ga = parse_ga(section);
  search.grid = parse_grid(section, objective, search.strategy == "grid");
  const MapReader random = section.map("random", {"samples"});
  search.random_samples = count_or(random, "samples", search.random_samples, 1, kMaxCount);
  search.nsga2 = parse_nsga2(section);
  // Like a grid, objectives may sit in a file another strategy runs (checked, not used).
  if (search.strategy == "nsga2" || section.has("objectives")) search.objectives = parse_objectives(section, dataset);
  search.unique_children = section.choice_or("unique_children", "false", {"true", "false"}) == "true";
  if (search.unique_children && search.strategy != "ga" && search.strategy != "nsga2") {
    section.field("unique_children")
        .fail("applies to strategies ga and nsga2 (grid never repeats; random draws independently)");
  }
  search.racing = parse_racing(section, search, dataset);
  return search;
}

}  // namespace midtune::load
