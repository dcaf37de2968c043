// The method registry: every method (LPES, PI, Ms-PoE, SIW, CALIOPE, PHS,
// attention temperature) is listed once, in methods/registry.cpp, and
// everyone who needs a fact about
// a method asks here: the Intervention's JSON (methods/intervention.cpp), the
// experiment loader (core/experiment), the server protocol, the backends'
// validation against the model and the gene-table objectives. A method's facts
// live in its own module, methods/<method>.{hpp,cpp}; backends see only the
// mechanism its field drives (intervention_needs), never its name.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/intervention.hpp"
#include "methods/method_types.hpp"

namespace midtune {

// One method as the rest of the program sees it.
struct MethodModule {
  // objective.kind, the experiment's section name and the combo member name.
  std::string name;
  // The Intervention field (and JSON key) it sets. Methods may share one
  // (PI writes LPES's rope_scale); the first method listed with a field owns
  // its JSON, validation and server probe.
  std::string field;
  // What the field makes the forward pass do; a method sharing a field has
  // its owner's mechanism. Backends derive how to run an Intervention from
  // it (intervention_needs), never from the method's name.
  std::optional<Mechanism> mechanism;
  // The searchable knobs of a gene-table method, in genome order, with hard
  // bounds and paper defaults. Empty: the method's genome is bespoke (LPES,
  // PI: objective.lpes / objective.pi).
  std::vector<GeneSchema> genes;
  std::vector<GeneOrder> orders;  // pairs of genes that must stay ordered
  // False where the paper gives no setting to compare with (SIW tunes its
  // alphas per model; attention temperature's neutral t = 1): its genes'
  // defaults are the plain model's, so a held-out "paper default" row would
  // only repeat the baseline's at the cost of as many forward passes.
  bool paper_gives_setting = true;

  std::function<bool(const Intervention&)> is_set;
  // Writes json[field] / reads it into the Intervention; throws
  // std::invalid_argument "intervention.<field>...: reason".
  std::function<void(const Intervention&, nlohmann::json& out)> write_json;
  std::function<void(const nlohmann::json& value, Intervention& out)> read_json;
  // The field against the model; throws std::invalid_argument naming the field.
  std::function<void(const Intervention&, const ModelShape&)> validate;
  // Copies the field from one Intervention to another (combining methods).
  std::function<void(const Intervention& from, Intervention& to)> copy_field;
  // A setting every model can run (layer 0, channel 0): a server probes its
  // backend with it to learn whether the field is supported.
  std::function<void(Intervention&)> set_probe;
  // Gene-table methods: gene values -> the method's part of the Intervention.
  std::function<void(const GeneValues&, Intervention&)> apply_genes;

  bool has_gene_table() const { return !genes.empty(); }
};

// What a module supplies about a method whose parameters are one optional
// field of the Intervention (Ms-PoE, CALIOPE, SIW, PHS).
template <typename Params>
struct ParamsFunctions {
  nlohmann::json (*to_json)(const Params&);
  Params (*from_json)(const nlohmann::json&);
  void (*validate)(const Params&, const ModelShape&);
  Params (*from_genes)(const GeneValues&);
};

// The MethodModule of such a method: every hook reads or writes `member`.
template <typename Params>
MethodModule optional_field_method(std::string name, std::string field, Mechanism mechanism,
                                   std::optional<Params> Intervention::*member,
                                   std::vector<GeneSchema> genes, std::vector<GeneOrder> orders,
                                   ParamsFunctions<Params> fns, Params probe) {
  MethodModule m;
  m.name = std::move(name);
  m.field = field;
  m.mechanism = mechanism;
  m.genes = std::move(genes);
  m.orders = std::move(orders);
  m.is_set = [member](const Intervention& iv) { return (iv.*member).has_value(); };
  m.write_json = [member, field, fns](const Intervention& iv, nlohmann::json& out) { out[field] = fns.to_json(*(iv.*member)); };
  m.read_json = [member, fns](const nlohmann::json& value, Intervention& out) { out.*member = fns.from_json(value); };
  m.validate = [member, fns](const Intervention& iv, const ModelShape& model) { fns.validate(*(iv.*member), model); };
  m.copy_field = [member](const Intervention& from, Intervention& to) { to.*member = from.*member; };
  m.set_probe = [member, probe](Intervention& iv) { iv.*member = probe; };
  m.apply_genes = [member, fns](const GeneValues& values, Intervention& out) { out.*member = fns.from_genes(values); };
  return m;
}

// Every method, in the order of the Intervention's fields, then the
// registered ones.
const std::vector<const MethodModule*>& method_modules();
// Adds a method defined outside this list (a test's toy method, a plug-in)
// that drives an existing Intervention field: its module and this call are
// all it needs. The registry keeps its address: pass a module that lives as
// long as the program (a function-local static, as every module is). Call
// before anything reads the registry (not synchronised with readers). Throws std::invalid_argument when the name is taken, the
// field is not an Intervention field, the mechanism differs from the field
// owner's, or a function is missing.
void register_method(const MethodModule& module);
// nullptr when no method has that name.
const MethodModule* find_method(const std::string& name);
// Throws std::invalid_argument "no method '<name>' (methods: ...)".
const MethodModule& method_named(const std::string& name);
// Every method name, in registry order.
const std::vector<std::string>& method_names();
// Names of the gene-table methods (mspoe, siw, caliope, phs, temperature).
const std::vector<std::string>& gene_table_methods();

// The distinct Intervention fields (rope_scale, mspoe, position_map, siw,
// hidden_channel, attention_temperature), each with the method that owns it.
const std::vector<const MethodModule*>& field_owners();
const std::vector<std::string>& intervention_fields();
// The fields `intervention` sets, in intervention_fields() order.
std::vector<std::string> intervention_fields_set(const Intervention& intervention);

// What running `intervention` needs: the union of mechanism_needs() over the
// mechanisms of the fields it sets (plain: nothing).
MechanismNeeds intervention_needs(const Intervention& intervention);

// Every field the Intervention sets, against the model. Throws
// std::invalid_argument "intervention.<field>: reason".
void validate_intervention(const Intervention& intervention, const ModelShape& model);

}  // namespace midtune
