#include "core/experiment/yaml_reader.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/experiment/config_error.hpp"
#include "core/experiment/nearest_name.hpp"

namespace midtune::yaml_reader {
namespace {

bool valid_mark(const YAML::Mark& mark) { return mark.line >= 0 && mark.column >= 0; }

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

Field::Field(const std::filesystem::path* file, YAML::Node node, std::string path,
             YAML::Mark fallback)
    : file_(file), node_(std::move(node)), path_(std::move(path)), fallback_(fallback) {}

YAML::Mark Field::mark() const {
  if (node_.IsDefined()) {
    const YAML::Mark own = node_.Mark();
    if (valid_mark(own)) return own;
  }
  return fallback_;
}

void Field::fail(const std::string& reason) const {
  const YAML::Mark where = mark();
  const bool known = valid_mark(where);
  throw ConfigError(*file_, known ? where.line + 1 : 0, known ? where.column + 1 : 0, path_,
                    reason);
}

std::string Field::kind_name() const {
  if (is_null()) return "null";
  if (node_.IsMap()) return "a mapping";
  if (node_.IsSequence()) return "a list";
  return "'" + node_.Scalar() + "'";
}

double Field::number() const {
  if (!is_scalar()) fail("expected a number, got " + kind_name());
  double value = 0;
  if (!YAML::convert<double>::decode(node_, value)) fail("expected a number, got " + kind_name());
  if (!std::isfinite(value)) fail("expected a finite number, got " + kind_name());
  return value;
}

double Field::number_in(double min, double max) const {
  const double value = number();
  if (value < min || value > max) {
    fail(format_number(value) + " is out of range: must be in [" + format_number(min) + ", " +
         format_number(max) + "]");
  }
  return value;
}

std::int64_t Field::integer() const {
  if (!is_scalar()) fail("expected an integer, got " + kind_name());
  std::int64_t value = 0;
  if (!YAML::convert<std::int64_t>::decode(node_, value)) {
    fail("expected an integer, got " + kind_name());
  }
  return value;
}

std::int64_t Field::integer_in(std::int64_t min, std::int64_t max) const {
  const std::int64_t value = integer();
  if (value < min || value > max) {
    fail(std::to_string(value) + " is out of range: must be in [" + std::to_string(min) + ", " +
         std::to_string(max) + "]");
  }
  return value;
}

std::uint64_t Field::unsigned_integer() const {
  if (!is_scalar()) fail("expected a non-negative integer, got " + kind_name());
  const std::string& text = node_.Scalar();
  std::uint64_t value = 0;
  // yaml-cpp would wrap "-1" round to 2^64-1, so reject a sign first.
  if (text.empty() || text[0] == '-' || !YAML::convert<std::uint64_t>::decode(node_, value)) {
    fail("expected a non-negative integer, got " + kind_name());
  }
  return value;
}

std::string Field::text() const {
  if (!is_scalar()) fail("expected text, got " + kind_name());
  return node_.Scalar();
}

std::string Field::choice(const std::vector<std::string>& choices) const {
  const std::string value = text();
  for (const auto& allowed : choices) {
    if (value == allowed) return value;
  }
  std::string reason = "'" + value + "' is not allowed: must be one of " + join_names(choices);
  const std::string suggestion = nearest_name(value, choices);
  if (!suggestion.empty()) reason += " (did you mean '" + suggestion + "'?)";
  fail(reason);
}

std::vector<Field> Field::list() const {
  if (!is_sequence()) fail("expected a list, got " + kind_name());
  // No list of an experiment needs more (gold positions, grid values,
  // endpoints); a longer one is a mistake that would cost memory by the GB.
  constexpr std::size_t kMaxItems = 1000;
  if (node_.size() > kMaxItems)
    fail("has " + std::to_string(node_.size()) + " items; at most " + std::to_string(kMaxItems) + " are accepted");
  std::vector<Field> items;
  items.reserve(node_.size());
  for (std::size_t i = 0; i < node_.size(); ++i) {
    items.emplace_back(file_, node_[i], path_ + "[" + std::to_string(i) + "]", mark());
  }
  return items;
}

std::vector<Field> Field::list_of_min_size(std::size_t min_size) const {
  std::vector<Field> items = list();
  if (items.size() < min_size) {
    fail("expected at least " + std::to_string(min_size) + " item" + (min_size == 1 ? "" : "s") +
         ", got " + std::to_string(items.size()));
  }
  return items;
}

MapReader::MapReader(const Field& field, std::vector<std::string> valid_keys,
                     const std::vector<Subsection>& subsections)
    : self_(field), file_(field.file()) {
  read_entries(&valid_keys, subsections);
}

MapReader::MapReader(const Field& field) : self_(field), file_(field.file()) {
  read_entries(nullptr, {});
}

namespace {

// "sub.key" when `key` (or a near spelling) is a key of one of the subsections.
std::string subsection_suggestion(const std::string& key,
                                  const std::vector<MapReader::Subsection>& subsections) {
  for (const auto& subsection : subsections) {
    const std::string near = nearest_name(key, subsection.keys);
    if (!near.empty()) return subsection.name + "." + near;
  }
  return "";
}

}  // namespace

void MapReader::read_entries(const std::vector<std::string>* valid_keys,
                             const std::vector<Subsection>& subsections) {
  const Field& field = self_;
  if (!field.is_null() && !field.is_map()) field.fail("expected a mapping, got " + field.kind_name());
  if (field.is_null()) return;
  for (const auto& item : field.node()) {
    Entry entry{item.first.IsScalar() ? item.first.Scalar() : std::string(), item.first,
                item.second};
    const Field key_field(file_, item.first, child_path(entry.key), field.mark());
    if (!item.first.IsScalar()) key_field.fail("a key must be plain text");
    if (find(entry.key) != nullptr) key_field.fail("duplicate key '" + entry.key + "'");
    const bool known = valid_keys == nullptr || std::find(valid_keys->begin(), valid_keys->end(),
                                                          entry.key) != valid_keys->end();
    if (!known) {
      std::string reason = "unknown key '" + entry.key + "'";
      std::string suggestion = nearest_name(entry.key, *valid_keys);
      if (suggestion.empty()) suggestion = subsection_suggestion(entry.key, subsections);
      if (!suggestion.empty()) {
        reason += "; did you mean '" + suggestion + "'?";
      } else {
        reason += "; valid keys here: " + join_names(*valid_keys, ", ");
      }
      key_field.fail(reason);
    }
    entries_.push_back(std::move(entry));
  }
}

std::string MapReader::child_path(const std::string& key) const {
  return path().empty() ? key : path() + "." + key;
}

const MapReader::Entry* MapReader::find(const std::string& key) const {
  for (const auto& entry : entries_) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

bool MapReader::has(const std::string& key) const {
  const Entry* entry = find(key);
  return entry != nullptr && !entry->value.IsNull();
}

Field MapReader::field(const std::string& key) const {
  const Entry* entry = find(key);
  if (entry == nullptr) return Field(file_, YAML::Node(), child_path(key), self_.mark());
  // An empty value (`key:`) has no mark of its own: point at the key.
  return Field(file_, entry->value, child_path(key), entry->key_node.Mark());
}

Field MapReader::required(const std::string& key) const {
  if (!has(key)) {
    // A quote left open swallows the lines after it into one text value:
    // name the value that holds the missing key instead of only the key.
    for (const Entry& entry : entries_) {
      if (!entry.value.IsScalar() || entry.value.Scalar().find(key + ":") == std::string::npos) continue;
      Field(file_, entry.value, child_path(entry.key), entry.key_node.Mark())
          .fail("its text holds '" + key + ":', so the required key '" + key +
                "' is inside this value: is a quote left open here?");
    }
    Field where = field(key);
    where.fail("missing required key '" + key + "'");
  }
  return field(key);
}

MapReader MapReader::map(const std::string& key, std::vector<std::string> valid_keys,
                         const std::vector<Subsection>& subsections) const {
  return MapReader(field(key), std::move(valid_keys), subsections);
}

double MapReader::number_or(const std::string& key, double fallback, double min,
                            double max) const {
  return has(key) ? field(key).number_in(min, max) : fallback;
}

std::int64_t MapReader::integer_or(const std::string& key, std::int64_t fallback,
                                   std::int64_t min, std::int64_t max) const {
  return has(key) ? field(key).integer_in(min, max) : fallback;
}

std::string MapReader::choice_or(const std::string& key, const std::string& fallback,
                                 const std::vector<std::string>& choices) const {
  return has(key) ? field(key).choice(choices) : fallback;
}

std::vector<std::string> MapReader::keys() const {
  std::vector<std::string> names;
  for (const auto& entry : entries_) names.push_back(entry.key);
  return names;
}

void MapReader::reject_if_present(const std::string& key, const std::string& reason) const {
  const Entry* entry = find(key);
  if (entry == nullptr) return;
  Field(file_, entry->value, child_path(key), entry->key_node.Mark()).fail(reason);
}

}  // namespace midtune::yaml_reader
