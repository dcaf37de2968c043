#include "methods/registry.hpp"

#include <algorithm>
#include <stdexcept>

#include "methods/caliope.hpp"
#include "methods/lpes.hpp"
#include "methods/mspoe.hpp"
#include "methods/phs.hpp"
#include "methods/pi.hpp"
#include "methods/siw.hpp"
#include "methods/self_extend.hpp"
#include "methods/string_shift.hpp"
#include "methods/temperature.hpp"

namespace midtune {
namespace {

std::vector<std::string> names_of(const std::vector<const MethodModule*>& modules,
                                  bool (*keep)(const MethodModule&)) {
  std::vector<std::string> out;
  for (const MethodModule* m : modules) {
    if (keep(*m)) out.push_back(m->name);
  }
  return out;
}

// The modules and what follows from them, rebuilt in place when a method is
// registered (so references handed out stay valid).
struct Registry {
  std::vector<const MethodModule*> modules;
  std::vector<std::string> names;
  std::vector<std::string> gene_table_names;
  std::vector<const MethodModule*> owners;
  std::vector<std::string> fields;

  void derive() {
    names = names_of(modules, [](const MethodModule&) { return true; });
    gene_table_names = names_of(modules, [](const MethodModule& m) { return m.has_gene_table(); });
    owners.clear();
    for (const MethodModule* m : modules) {
      const bool owned = std::any_of(owners.begin(), owners.end(), [&](const MethodModule* o) { return o->field == m->field; });
      if (!owned) owners.push_back(m);
    }
    fields.clear();
    for (const MethodModule* m : owners) fields.push_back(m->field);
  }
};

Registry& registry() {
  static Registry r = [] {
    Registry out;
    // THE list of methods: a new method adds its module's line here.
    out.modules = {&lpes_method(), &pi_method(),          &mspoe_method(),       &caliope_method(),     &siw_method(),
                   &phs_method(),  &temperature_method(), &self_extend_method(), &string_shift_method()};
    out.derive();
    return out;
  }();
  return r;
}

const MethodModule* owner_of(const std::string& field) {
  for (const MethodModule* m : registry().owners) {
    if (m->field == field) return m;
  }
  return nullptr;
}

}  // namespace

const std::vector<const MethodModule*>& method_modules() { return registry().modules; }

void register_method(const MethodModule& module) {
  const std::string what = "register_method('" + module.name + "'): ";
  if (module.name.empty()) throw std::invalid_argument("register_method: the method has no name");
  if (find_method(module.name) != nullptr) throw std::invalid_argument(what + "a method of that name exists");
  const MethodModule* owner = owner_of(module.field);
  if (owner == nullptr) {
    std::string known;
    for (const std::string& f : intervention_fields()) known += (known.empty() ? "" : ", ") + f;
    throw std::invalid_argument(what + "field '" + module.field + "' is not an Intervention field (fields: " + known + ")");
  }
  if (!module.mechanism || module.mechanism != owner->mechanism) {
    throw std::invalid_argument(what + "field '" + module.field + "' drives mechanism " + to_string(*owner->mechanism) +
                                (module.mechanism ? std::string(", not ") + to_string(*module.mechanism) : ", none given"));
  }
  if (!module.is_set || !module.write_json || !module.read_json || !module.validate || !module.copy_field ||
      !module.set_probe || (module.has_gene_table() && !module.apply_genes)) {
    throw std::invalid_argument(what + "a function of its module is missing");
  }
  Registry& r = registry();
  r.modules.push_back(&module);
  r.derive();
}

const MethodModule* find_method(const std::string& name) {
  for (const MethodModule* m : method_modules()) {
    if (m->name == name) return m;
  }
  return nullptr;
}

const std::vector<std::string>& method_names() { return registry().names; }

const MethodModule& method_named(const std::string& name) {
  if (const MethodModule* m = find_method(name)) return *m;
  std::string known;
  for (const std::string& n : method_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("no method '" + name + "' (methods: " + known + ")");
}

const std::vector<std::string>& gene_table_methods() { return registry().gene_table_names; }

const std::vector<const MethodModule*>& field_owners() { return registry().owners; }

const std::vector<std::string>& intervention_fields() { return registry().fields; }

std::vector<std::string> intervention_fields_set(const Intervention& intervention) {
  std::vector<std::string> out;
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(intervention)) out.push_back(m->field);
  }
  return out;
}

MechanismNeeds intervention_needs(const Intervention& intervention) {
  MechanismNeeds needs;
  for (const MethodModule* m : field_owners()) {
    if (!m->is_set(intervention)) continue;
    if (!m->mechanism) throw std::logic_error("method '" + m->name + "' names no mechanism");
    needs |= mechanism_needs(*m->mechanism);
  }
  return needs;
}

void validate_intervention(const Intervention& intervention, const ModelShape& model) {
  std::vector<const MethodModule*> set;
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(intervention) && m->mechanism) set.push_back(m);
  }
  for (std::size_t i = 0; i < set.size(); ++i) {
    for (std::size_t j = i + 1; j < set.size(); ++j) {
      if (const char* why = mechanism_conflict(*set[i]->mechanism, *set[j]->mechanism)) {
        throw std::invalid_argument("intervention." + set[i]->field + " (" + set[i]->name + ") and intervention." +
                                    set[j]->field + " (" + set[j]->name + ") cannot combine: " + why);
      }
    }
  }
  for (const MethodModule* m : field_owners()) {
    if (!m->is_set(intervention)) continue;
    if (!model.rope && m->mechanism && mechanism_needs(*m->mechanism).rope_positions) {
      // Refused by what the method does, whichever method it is.
      std::string methods;
      for (const MethodModule* other : method_modules()) {
        if (other->field == m->field) methods += (methods.empty() ? "" : ", ") + other->name;
      }
      throw std::invalid_argument("intervention." + m->field + " (" + methods + ") acts through " +
                                  to_string(*m->mechanism) + ", which scales or remaps RoPE positions, and the model" +
                                  (model.architecture.empty() ? "" : " ('" + model.architecture + "')") +
                                  " has no RoPE");
    }
    m->validate(intervention, model);
  }
}

}  // namespace midtune
