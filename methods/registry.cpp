#include "methods/registry.hpp"

#include <algorithm>
#include <stdexcept>

#include "methods/caliope.hpp"
#include "methods/lpes.hpp"
#include "methods/mspoe.hpp"
#include "methods/phs.hpp"
#include "methods/pi.hpp"
#include "methods/siw.hpp"

namespace midtune {

const std::vector<const MethodModule*>& method_modules() {
  // THE list of methods: a new method adds its module's line here.
  static const std::vector<const MethodModule*> modules = {
      &lpes_method(), &pi_method(), &mspoe_method(), &caliope_method(), &siw_method(), &phs_method(),
  };
  return modules;
}

const MethodModule* find_method(const std::string& name) {
  for (const MethodModule* m : method_modules()) {
    if (m->name == name) return m;
  }
  return nullptr;
}

namespace {

std::vector<std::string> names_of(const std::vector<const MethodModule*>& modules,
                                  bool (*keep)(const MethodModule&)) {
  std::vector<std::string> out;
  for (const MethodModule* m : modules) {
    if (keep(*m)) out.push_back(m->name);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names = names_of(method_modules(), [](const MethodModule&) { return true; });
  return names;
}

const MethodModule& method_named(const std::string& name) {
  if (const MethodModule* m = find_method(name)) return *m;
  std::string known;
  for (const std::string& n : method_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("no method '" + name + "' (methods: " + known + ")");
}

const std::vector<std::string>& gene_table_methods() {
  static const std::vector<std::string> names =
      names_of(method_modules(), [](const MethodModule& m) { return m.has_gene_table(); });
  return names;
}

const std::vector<const MethodModule*>& field_owners() {
  static const std::vector<const MethodModule*> owners = [] {
    std::vector<const MethodModule*> out;
    for (const MethodModule* m : method_modules()) {
      const bool owned = std::any_of(out.begin(), out.end(), [&](const MethodModule* o) { return o->field == m->field; });
      if (!owned) out.push_back(m);
    }
    return out;
  }();
  return owners;
}

const std::vector<std::string>& intervention_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> out;
    for (const MethodModule* m : field_owners()) out.push_back(m->field);
    return out;
  }();
  return fields;
}

std::vector<std::string> intervention_fields_set(const Intervention& intervention) {
  std::vector<std::string> out;
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(intervention)) out.push_back(m->field);
  }
  return out;
}

void validate_intervention(const Intervention& intervention, const ModelShape& model) {
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(intervention)) m->validate(intervention, model);
  }
}

}  // namespace midtune
