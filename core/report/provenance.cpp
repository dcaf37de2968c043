#include "core/report/provenance.hpp"

namespace midtune::report {

using nlohmann::json;

json provenance_json(const json& search_config) {
  const json backend = search_config.value("backend", json::object());
  const json dataset = search_config.value("dataset", json::object());
  return {{"model", backend.value("identity", json(nullptr))}, {"data", dataset.value("contents", json(nullptr))}};
}

std::string provenance_text(const json& provenance) {
  const json& model = provenance.at("model");
  std::string text;
  if (model.is_object()) {
    text = model.value("name", std::string("?")) + " (" + model.value("architecture", std::string("?")) + ", " +
           std::to_string(model.value("layers", 0)) + " layers";
    const std::string content = model.value("content_hash", std::string());
    text += ", " + (content.empty() ? std::string("content not reported by the backend") : content);
    if (const std::string precision = model.value("precision", std::string()); !precision.empty())
      text += ", precision " + precision;
    text += ")";
  } else {
    text = "model not recorded (stored by an earlier midtune)";
  }
  const json& data = provenance.at("data");
  text += "; data " + (data.is_string() ? data.get<std::string>() : std::string("not recorded"));
  return text;
}

std::string run_path(const json& run) {
  if (!run.is_object()) return "-";
  const json execution = run.value("execution", json::object());
  if (execution.contains("kernel_path")) return execution["kernel_path"].get<std::string>();
  return execution.value("device", std::string("-"));
}

std::string run_text(const json& run) {
  if (!run.is_object()) return "not recorded (stored by an earlier midtune)";
  const json execution = run.value("execution", json::object());
  std::string text = "midtune " + run.value("build", json::object()).value("version", std::string("?"));
  if (execution.contains("kernel_path")) text += ", kernel path " + execution["kernel_path"].get<std::string>();
  if (execution.contains("device")) text += ", device " + execution["device"].get<std::string>();
  if (execution.contains("threads")) text += ", " + execution["threads"].dump() + " threads";
  if (execution.contains("precision")) text += ", precision " + execution["precision"].get<std::string>();
  return text + ", " + run.value("cpu", std::string("?")) + ", host " + run.value("host", std::string("?"));
}

}  // namespace midtune::report
