// Typed, checked access to a parsed YAML document. Every failure throws
// ConfigError carrying the file, the line:column (yaml-cpp Mark, 1-based), the
// dotted key path and the reason, so section parsers only state the rules.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace midtune::yaml_reader {

// One value in the document and where it sits.
class Field {
 public:
  Field(const std::filesystem::path* file, YAML::Node node, std::string path, YAML::Mark fallback);

  const std::string& path() const { return path_; }
  const std::filesystem::path* file() const { return file_; }
  const YAML::Node& node() const { return node_; }
  YAML::Mark mark() const;
  bool is_null() const { return !node_.IsDefined() || node_.IsNull(); }
  bool is_sequence() const { return node_.IsSequence(); }
  bool is_map() const { return node_.IsMap(); }
  bool is_scalar() const { return node_.IsScalar(); }

  [[noreturn]] void fail(const std::string& reason) const;

  double number() const;  // finite
  double number_in(double min, double max) const;
  std::int64_t integer() const;
  std::int64_t integer_in(std::int64_t min, std::int64_t max) const;
  std::uint64_t unsigned_integer() const;
  std::string text() const;  // any scalar, as written
  std::string choice(const std::vector<std::string>& choices) const;
  // Elements with paths `key[i]`; a scalar is not accepted as a one-element list.
  std::vector<Field> list() const;
  std::vector<Field> list_of_min_size(std::size_t min_size) const;

  // "mapping", "list", "text", "null": what the document holds, for messages.
  std::string kind_name() const;

 private:
  const std::filesystem::path* file_;
  YAML::Node node_;
  std::string path_;
  YAML::Mark fallback_;
};

// A mapping whose keys must all come from a known set. Construction rejects
// duplicate keys and unknown keys (suggesting the nearest valid one); a null
// or absent node reads as an empty mapping.
class MapReader {
 public:
  // A key of a subsection written one level too high; an unknown key that
  // matches one is reported as "did you mean 'ga.population'?".
  struct Subsection {
    std::string name;
    std::vector<std::string> keys;
  };

  MapReader(const Field& field, std::vector<std::string> valid_keys,
            const std::vector<Subsection>& subsections = {});
  // A mapping of user-chosen names (any key; duplicates still rejected).
  explicit MapReader(const Field& field);

  const std::string& path() const { return self_.path(); }
  const Field& self() const { return self_; }
  std::string child_path(const std::string& key) const;

  // Present and not null.
  bool has(const std::string& key) const;
  // The value (null when absent, marked at this mapping).
  Field field(const std::string& key) const;
  // The value; throws "missing required key" when absent or null.
  Field required(const std::string& key) const;
  MapReader map(const std::string& key, std::vector<std::string> valid_keys,
                const std::vector<Subsection>& subsections = {}) const;

  double number_or(const std::string& key, double fallback, double min, double max) const;
  std::int64_t integer_or(const std::string& key, std::int64_t fallback, std::int64_t min,
                          std::int64_t max) const;
  std::string choice_or(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& choices) const;

  // Keys in document order (for user-named entries such as genes).
  std::vector<std::string> keys() const;
  // Throws `reason` at `key` when the key is present (a key that does not
  // apply in this context, e.g. `endpoints` for an engine backend).
  void reject_if_present(const std::string& key, const std::string& reason) const;

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };
  const Entry* find(const std::string& key) const;

  void read_entries(const std::vector<std::string>* valid_keys,
                    const std::vector<Subsection>& subsections);

  Field self_;
  const std::filesystem::path* file_;
  std::vector<Entry> entries_;
};

}  // namespace midtune::yaml_reader
