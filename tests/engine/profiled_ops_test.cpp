// ProfiledOps (bench/cuda_bench_cli --profile) must not change what the
// device it wraps computes, and must count each op where it ran.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/engine/batched/profiled_ops.hpp"
#include "backends/engine/batched/reference_ops.hpp"

namespace midtune::engine::batched {
namespace {

TEST(ProfiledOps, ForwardsEveryCallAndCountsItByOp) {
  ProfiledOps profiled(std::make_unique<ReferenceOps>());
  ReferenceOps plain;
  EXPECT_EQ(profiled.name(), plain.name());
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};  // vocab 3 x width 2
  const std::vector<std::int32_t> tokens = {2, 0};
  std::vector<float> expected(4), got(4);
  plain.embed_rows(table.data(), 2, tokens.data(), 2, 0.5f, expected.data());

  DeviceBuffer<float> device_table(profiled, table.size()), out(profiled, 4);
  DeviceBuffer<std::int32_t> device_tokens(profiled, tokens.size());
  profiled.upload(device_table.data(), table.data(), table.size() * sizeof(float));
  profiled.upload(device_tokens.data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  profiled.embed_rows(device_table.data(), 2, device_tokens.data(), 2, 0.5f, out.data());
  profiled.download(got.data(), out.data(), got.size() * sizeof(float));
  EXPECT_EQ(got, expected);  // {2.5, 3, 0.5, 1}

  const auto calls = [&](const std::string& op) {
    for (const auto& row : profiled.rows()) {
      if (row.op == op) return row.calls;
    }
    return std::size_t{0};
  };
  const std::vector<ProfiledOps::Row> rows = profiled.rows();
  EXPECT_EQ(calls("allocate"), 3u);
  EXPECT_EQ(calls("upload"), 2u);
  EXPECT_EQ(calls("embed"), 1u);
  EXPECT_EQ(calls("download"), 1u);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].seconds, rows[i].seconds) << "largest first";

  profiled.reset();
  EXPECT_TRUE(profiled.rows().empty());
  std::vector<float> x = {1, 2}, y = {3, 4};
  DeviceBuffer<float> dx(profiled, 2), dy(profiled, 2);
  profiled.upload(dx.data(), x.data(), 8);
  profiled.upload(dy.data(), y.data(), 8);
  profiled.add(dx.data(), dy.data(), 2);
  profiled.download(x.data(), dx.data(), 8);
  EXPECT_EQ(x, (std::vector<float>{4, 6}));
  EXPECT_EQ(calls("add"), 1u);
  EXPECT_EQ(calls("allocate"), 2u);  // counted again from zero
  EXPECT_EQ(calls("embed"), 0u);
}

}  // namespace
}  // namespace midtune::engine::batched
