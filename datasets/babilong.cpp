#include "datasets/babilong.hpp"

#include <string_view>

#include "datasets/json_fields.hpp"
#include "datasets/jsonl_file.hpp"

namespace midtune::datasets {

std::string babilong_asked_item(const std::string& question) {
  constexpr std::string_view kPrefix = "Where is the ";
  std::string_view rest(question);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\n')) rest.remove_suffix(1);
  if (!rest.starts_with(kPrefix) || !rest.ends_with("?") || rest.size() <= kPrefix.size() + 1) return "";
  return std::string(rest.substr(kPrefix.size(), rest.size() - kPrefix.size() - 1));
}

BabilongFile read_babilong_file(const std::string& path) {
  const auto parse = [](const std::string& path, const JsonLine& line) {
    const RecordReader reader(path, line);
    BabilongItem item;
    item.id = reader.item_id();
    item.source_file = path;
    item.source_line = line.line_number;
    item.input = reader.string_field("input");
    item.question = reader.string_field("question");
    item.target = reader.string_field("target");
    if (item.input.empty()) reader.fail("input", "is empty");
    if (item.question.empty()) reader.fail("question", "is empty");
    if (item.target.empty()) reader.fail("target", "is empty");
    return item;
  };
  const JsonlContents contents = read_jsonl(path);
  return {parse_records<BabilongItem>(path, contents, parse), contents.content_hash};
}

}  // namespace midtune::datasets
