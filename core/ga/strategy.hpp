// The ask/tell contract between search strategies (ga | grid | random |
// nsga2, the Pareto search over 2-3 objectives: nsga2.hpp) and
// the run loop (pagmo2-style separation of problem, algorithm, population).
//
// The run loop calls ask() for a batch of candidates, evaluates them (or
// takes cached fitness), and calls tell() with one fitness per candidate in
// the same order. A strategy is deterministic given its seed and the fitness
// values it is told, and its whole state (including the RNG) round-trips
// through save_state()/load_state(), so the run loop can checkpoint after
// every tell() and a resumed run continues exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune {

// Gene values. Integer and stepped-float genes hold their value; categorical
// genes hold the index of the chosen value.
using Genome = std::vector<double>;

enum class Origin { init, crossover, mutation, elite, grid, random };
const char* to_string(Origin origin);
// Inverse of to_string; throws std::invalid_argument on an unknown name.
Origin origin_from_string(const std::string& name);

struct Candidate {
  Genome genome;
  Origin origin = Origin::init;
  // Indices into the strategy's population history (ids the strategy
  // assigns; the store keeps them), empty for init/grid/random.
  std::vector<std::int64_t> parents;
  std::int64_t id = -1;  // strategy-assigned, unique within a search
};

// A new candidate with the next id of a strategy's counter (ids are unique
// within a search and never reused).
Candidate next_candidate(std::int64_t& next_id, Genome genome, Origin origin, std::vector<std::int64_t> parents = {});

// What the run loop knows about earlier proposals: a genome is "known" when
// its decoded intervention was evaluated before in this experiment or is
// already in the batch being built. Strategies configured with unique
// children consult it so every generation evaluates new candidates (equal
// interventions would only be served from the cache).
class ProposalMemory {
 public:
  virtual ~ProposalMemory() = default;
  virtual bool known(const Genome& genome) const = 0;
  virtual void remember(const Genome& genome) = 0;
};

// Draws a proposal is redrawn at most, when unique children are on, before
// the last draw is kept although it is known (a small or exhausted space).
inline constexpr int kMaxProposalDraws = 20;

// The competition a batch's candidates race in: the next parents are the
// `parents` best of the carried members and the batch (after each crossover
// pair keeps its fitter child).
struct RaceField {
  int parents = 0;
  std::vector<std::int64_t> carried;  // ids of earlier members that compete too, each scored in full
  std::vector<int> sibling;           // per batch candidate: its crossover sibling's index in the batch, or -1
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Next batch to evaluate; empty when done(). Calling ask() twice without
  // tell() returns the same batch (so a resumed run re-asks safely).
  virtual std::vector<Candidate> ask() = 0;
  virtual void tell(const std::vector<double>& fitness) = 0;
  // How many objectives each candidate is scored on: 1 for the scalar
  // strategies, 2 or 3 for a Pareto search (nsga2), which is told through
  // tell_objectives() instead (every objective maximised).
  virtual int objectives() const { return 1; }
  // One vector of objectives() values per candidate. The default serves the
  // single-objective strategies: it forwards each candidate's only value.
  virtual void tell_objectives(const std::vector<std::vector<double>>& values);
  virtual bool done() const = 0;
  // Why done() holds before the configured end (an early stop rule), empty
  // otherwise; the run loop reports it.
  virtual std::string stop_reason() const { return {}; }
  // Generation counter (0-based) of the batch ask() returns next.
  virtual int generation() const = 0;
  // Members of the current population (ids), for the generations table.
  virtual std::vector<std::int64_t> population() const = 0;
  virtual nlohmann::json save_state() const = 0;
  virtual void load_state(const nlohmann::json& state) = 0;
  // Racing: what the pending batch races for (core/search/racing.hpp);
  // nullopt when its parents are not simply the best members (a strategy
  // where any member may be picked), so nothing can be dropped early.
  virtual std::optional<RaceField> race_field() const { return std::nullopt; }
  // The run loop sets it before each ask(); nullptr (the default) or a
  // strategy without unique children never redraws. Not part of the state:
  // the run loop rebuilds it from the stored individuals, so a resumed run
  // sees the same memory.
  void set_proposal_memory(ProposalMemory* memory) { memory_ = memory; }

 protected:
  // Draws a proposal (one or more genomes) until every genome is new to the
  // memory and to the others in it, at most kMaxProposalDraws times (the last
  // draw is kept when none is), and remembers the kept genomes. With unique
  // = false or no memory it draws exactly once, so the RNG stream is the one
  // of a strategy without the option.
  template <class Proposal, class Draw, class GenomesOf>
  Proposal draw_unique(bool unique, Draw draw, GenomesOf genomes_of) {
    Proposal proposal = draw();
    if (!unique || memory_ == nullptr) return proposal;
    for (int tries = 1; tries < kMaxProposalDraws && !all_new(genomes_of(proposal)); ++tries) proposal = draw();
    for (const Genome& genome : genomes_of(proposal)) memory_->remember(genome);
    return proposal;
  }

 private:
  bool all_new(const std::vector<Genome>& genomes) const;
  ProposalMemory* memory_ = nullptr;
};

}  // namespace midtune
