#include "backends/server/json_reader.hpp"

#include <cmath>

namespace midtune::server {

using nlohmann::json;

void protocol_error(const std::string& path, const std::string& reason) {
  throw ProtocolError(path + ": " + reason);
}

ObjectReader::ObjectReader(const json& j, std::string path) : object_(j), path_(std::move(path)) {
  if (!j.is_object())
    protocol_error(path_.empty() ? "body" : path_, "must be a JSON object, got " + std::string(j.type_name()));
}

std::string ObjectReader::path_of(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const json& ObjectReader::required(const std::string& key) {
  auto it = object_.find(key);
  if (it == object_.end()) protocol_error(path_of(key), "missing");
  seen_.insert(key);
  return *it;
}

std::string ObjectReader::string(const std::string& key, std::size_t min_bytes, std::size_t max_bytes) {
  const json& v = required(key);
  if (!v.is_string()) protocol_error(path_of(key), "must be a string, got " + std::string(v.type_name()));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() < min_bytes)
    protocol_error(path_of(key), "must be at least " + std::to_string(min_bytes) + " bytes long");
  if (s.size() > max_bytes)
    protocol_error(path_of(key), "is " + std::to_string(s.size()) + " bytes, more than the limit of " +
                                     std::to_string(max_bytes));
  return s;
}

long long ObjectReader::integer(const std::string& key, long long lo, long long hi) {
  const json& v = required(key);
  if (!v.is_number_integer())
    protocol_error(path_of(key), "must be an integer, got " + std::string(v.type_name()));
  // Unsigned values above the signed range are out of every range we allow.
  if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(hi))
    protocol_error(path_of(key), "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  const long long x = v.get<long long>();
  if (x < lo || x > hi)
    protocol_error(path_of(key), std::to_string(x) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

double ObjectReader::number(const std::string& key, double lo, double hi) {
  const json& v = required(key);
  if (!v.is_number()) protocol_error(path_of(key), "must be a number, got " + std::string(v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    protocol_error(path_of(key), "must be a finite number in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return x;
}

bool ObjectReader::boolean(const std::string& key) {
  const json& v = required(key);
  if (!v.is_boolean()) protocol_error(path_of(key), "must be true or false, got " + std::string(v.type_name()));
  return v.get<bool>();
}

void ObjectReader::reject_unknown() const {
  for (auto it = object_.begin(); it != object_.end(); ++it)
    if (!seen_.count(it.key())) protocol_error(path_of(it.key()), "unknown field");
}

}  // namespace midtune::server
