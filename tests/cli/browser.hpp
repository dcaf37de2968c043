// A report page as a person sees it: Debian's chromium (installed by
// scripts/test.sh) run headless on a file, its parsed DOM and a screenshot,
// and the screenshot's colours decoded with zlib (a blank page has one).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace midtune::testing {

inline std::string chromium() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"})
    for (const char* name : {"chromium", "chromium-browser"})
      if (std::filesystem::exists(std::filesystem::path(dir) / name))
        return (std::filesystem::path(dir) / name).string();
  return "";
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// How often `needle` occurs in `text` (e.g. a CSS class in a parsed DOM).
inline std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// The distinct colours of an 8-bit RGB or RGBA, non-interlaced PNG (what
// chromium writes), decoded with zlib and the five PNG row filters; empty
// for anything else.
inline std::set<std::uint32_t> png_colours(const std::vector<unsigned char>& png, std::size_t& pixels) {
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 33 || std::memcmp(png.data(), kSignature, 8) != 0) return {};
  std::uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<unsigned char> compressed;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const std::uint32_t length = big_endian(&png[at]);
    const std::string type(reinterpret_cast<const char*>(&png[at + 4]), 4);
    if (at + 12 + length > png.size()) return {};
    const unsigned char* data = &png[at + 8];
    if (type == "IHDR") {
      width = big_endian(data);
      height = big_endian(data + 4);
      if (data[8] != 8 || data[12] != 0) return {};  // 8 bits, not interlaced
      channels = data[9] == 6 ? 4 : data[9] == 2 ? 3 : 0;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    }
    at += 12 + length;
  }
  if (channels == 0 || width == 0) return {};
  const std::size_t stride = std::size_t{width} * channels;
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK || raw_size != raw.size()) return {};
  std::vector<unsigned char> previous(stride, 0), row(stride);
  std::set<std::uint32_t> colours;
  for (std::uint32_t y = 0; y < height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(channels) ? row[x - channels] : 0, b = previous[x],
                c = x >= static_cast<std::size_t>(channels) ? previous[x - channels] : 0;
      int predictor = 0;
      if (filter == 1) predictor = a;
      else if (filter == 2) predictor = b;
      else if (filter == 3) predictor = (a + b) / 2;
      else if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      row[x] = static_cast<unsigned char>(in[x] + predictor);
    }
    for (std::size_t x = 0; x < stride; x += channels)
      colours.insert((std::uint32_t{row[x]} << 16) | (std::uint32_t{row[x + 1]} << 8) | row[x + 2]);
    previous = row;
  }
  pixels = std::size_t{width} * height;
  return colours;
}

// What chromium parsed from `html` (its DOM, serialised), and a screenshot
// at `screenshot`; `dir` holds the browser profile and the DOM file. Each
// call is bounded by `timeout 60` (a render takes ~2 s).
inline std::string render(const std::string& browser, const std::string& html, const std::string& screenshot,
                          const std::string& dir) {
  const std::string common = "timeout 60 " + browser +
                             " --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir=" + dir +
                             "/chromium-profile --window-size=1000,2400 ";
  const std::string dom = dir + "/dom.html";
  EXPECT_EQ(std::system((common + "--dump-dom file://" + html + " > " + dom + " 2>/dev/null").c_str()), 0);
  EXPECT_EQ(std::system((common + "--screenshot=" + screenshot + " file://" + html + " > /dev/null 2>&1").c_str()), 0);
  std::ifstream in(dom);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A PNG chromium wrote, with more than a blank page's handful of colours.
inline ::testing::AssertionResult screenshot_has_content(const std::string& png) {
  std::size_t pixels = 0;
  const std::set<std::uint32_t> colours = png_colours(read_bytes(png), pixels);
  if (pixels == 0) return ::testing::AssertionFailure() << png << ": not a PNG chromium could write";
  if (colours.size() <= 20) return ::testing::AssertionFailure() << png << ": blank (" << colours.size() << " colours)";
  return ::testing::AssertionSuccess();
}

}  // namespace midtune::testing
