// LPES genome spaces (docs/methods.md "LPES"; paper 000 section 3.2, Appendix B):
// D + 1 control points on the ControlGrid, or one free scale per layer for
// the brute-force ablation, and the decode genome -> per-layer RoPE scales.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/bezier/control_grid.hpp"
#include "core/bezier/curve.hpp"
#include "core/ga/genome.hpp"

namespace midtune {

struct LpesSpec {
  bezier::CurveKind curve = bezier::CurveKind::bezier;
  int degree = 3;  // D: D + 1 control points (ignored for brute_force)
  bezier::ControlGrid grid;
  // Throws std::invalid_argument naming the field and the reason.
  void validate() const;
  bool operator==(const LpesSpec&) const = default;
};
void to_json(nlohmann::json& out, const LpesSpec& spec);
// {"curve": "bezier", "degree": 3, "grid": {...}}; missing fields keep defaults.
void from_json(const nlohmann::json& in, LpesSpec& spec);

// Control-point curves: genes x0, y0, x1, y1, ..., xD, yD; x is an IntGene
// on [0, L-1] when x_step is 1, else a FloatGene; y a FloatGene on
// [y_min, y_max] step y_step; predicate: x strictly increasing (eq. 10);
// seed: the eq. 8 individual; control_points() layout set.
// brute_force: genes s0..s{L-1} on the y grid, no predicate, seed all initial_y.
GenomeSpace lpes_genome_space(const LpesSpec& spec);

// The eq. 8 individual: P_k = (k(L-1)/D, initial_y), x rounded to the grid
// (strictly increasing whenever L-1 >= D x_step, which validate() checks).
Genome lpes_initial_genome(const LpesSpec& spec);

// Genes (x0, y0, ..., xD, yD) -> points. Throws on an odd/short genome.
std::vector<bezier::ControlPoint> control_points_of(const Genome& genome);

// Per-layer scales s_0..s_{L-1} for a valid genome of lpes_genome_space(spec)
// (LPES eqs. 5-6, or the genes themselves for brute_force).
std::vector<double> lpes_layer_scales(const LpesSpec& spec, const Genome& genome);

}  // namespace midtune
