// The CUDA decode step's key splitting (ops/decode_split.hpp) on the host:
// the parts a query's keys take cover them once, in order, and never leave
// the first part empty; the number of parts stays within the workspace the
// device allocates for any step; and the kernels' arithmetic — each part's
// normalised output and log-sum-exp, then the merge — replayed in float
// gives the softmax over every key. The kernels themselves are checked on
// a GPU (device_bodies_test's DecodeAttentionOfSeveralSequences).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/ops/decode_split.hpp"

namespace midtune::engine {
namespace {

using decode_split::KeyRange;

TEST(DecodeSplit, PartsCoverEveryKeyOnceInOrderAndTheFirstIsNeverEmpty) {
  for (const int visible : {0, 1, 37}) {
    for (int keys = 1; keys <= 300; ++keys) {
      const int limit = visible + keys;
      for (int splits = 1; splits <= decode_split::kMaxSplits; ++splits) {
        const std::string what = "visible " + std::to_string(visible) + ", keys " + std::to_string(keys) + ", splits " +
                                 std::to_string(splits);
        int next = visible;
        bool seen_empty = false;
        for (int s = 0; s < splits; ++s) {
          const KeyRange part = decode_split::key_split(visible, limit, s, splits);
          ASSERT_EQ(part.first, next) << what << ", part " << s;
          ASSERT_LE(part.first, part.end) << what << ", part " << s;
          if (part.first == part.end) {
            seen_empty = true;
          } else {
            ASSERT_FALSE(seen_empty) << what << ": a part with keys after an empty one";
          }
          next = part.end;
        }
        ASSERT_EQ(next, limit) << what;
        const KeyRange first = decode_split::key_split(visible, limit, 0, splits);
        ASSERT_LT(first.first, first.end) << what;
      }
    }
  }
}

TEST(DecodeSplit, SplitsOnlySmallStepsAndStaysInsideTheDevicesWorkspace) {
  // A decode batch of one on an H100 (132 SMs), Llama-2-7B's 32 heads:
  // after 512 keys, parts of the fewest keys; after 4096, enough parts to
  // give every SM its blocks.
  const int fill = decode_split::kBlocksPerSm * 132;
  EXPECT_EQ(decode_split::split_count(32, 512, 132), 512 / decode_split::kMinSplitKeys);
  EXPECT_EQ(decode_split::split_count(32, 4096, 132), (fill + 31) / 32);
  // Enough blocks to fill the GPU, or too few keys to share: one part.
  EXPECT_EQ(decode_split::split_count(fill, 4096, 132), 1);
  EXPECT_EQ(decode_split::split_count(32 * 32, 4096, 132), 1);
  EXPECT_EQ(decode_split::split_count(4, decode_split::kMinSplitKeys, 132), 1);
  EXPECT_EQ(decode_split::split_count(0, 100, 132), 1);
  for (const int multiprocessors : {1, 16, 78, 108, 132, 144}) {
    const std::size_t room = decode_split::largest_workspace_floats(multiprocessors, 256);
    for (int blocks = 1; blocks <= 600; ++blocks) {
      for (const int keys : {1, 63, 64, 65, 200, 1000, 5000, 100000}) {
        const int splits = decode_split::split_count(blocks, keys, multiprocessors);
        ASSERT_GE(splits, 1);
        ASSERT_LE(splits, decode_split::kMaxSplits);
        if (splits > 1) {  // one part needs no workspace
          ASSERT_LE(decode_split::workspace_floats(blocks, splits, 256), room)
              << blocks << " blocks, " << keys << " keys, " << multiprocessors << " SMs";
        }
      }
    }
  }
}

// Part [first, end) of one query as decode_split_attention_kernel leaves
// it: its softmax-normalised output and the log-sum-exp of its scores
// (an empty part: zeros and -infinity), in float.
void attend_part(const std::vector<float>& scores, const std::vector<float>& values, int head_dim, KeyRange part,
                 float* out, float* lse) {
  if (part.first == part.end) {
    for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
    *lse = -INFINITY;
    return;
  }
  float largest = -INFINITY;
  for (int k = part.first; k < part.end; ++k) largest = std::max(largest, scores[k]);
  float sum = 0.0f;
  std::vector<float> acc(head_dim, 0.0f);
  for (int k = part.first; k < part.end; ++k) {
    const float w = std::exp(scores[k] - largest);
    sum += w;
    for (int d = 0; d < head_dim; ++d) acc[d] += w * values[static_cast<std::size_t>(k) * head_dim + d];
  }
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] / sum;
  *lse = largest + std::log(sum);
}

TEST(DecodeSplit, MergedPartsGiveTheSoftmaxOverEveryKey) {
  std::mt19937 rng(7);
  const int head_dim = 8;
  for (const int keys : {1, 5, 64, 65, 700}) {
    for (const float spread : {1.0f, 30.0f}) {  // 30: parts whose shares differ by far more than float holds
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> scores(keys), values(static_cast<std::size_t>(keys) * head_dim);
      for (float& s : scores) s = spread * normal(rng);
      for (float& v : values) v = normal(rng);
      // The whole softmax, in double.
      double largest = -INFINITY, sum = 0.0;
      for (const float s : scores) largest = std::max(largest, static_cast<double>(s));
      std::vector<double> whole(head_dim, 0.0);
      for (int k = 0; k < keys; ++k) {
        const double w = std::exp(scores[k] - largest);
        sum += w;
        for (int d = 0; d < head_dim; ++d) whole[d] += w * values[static_cast<std::size_t>(k) * head_dim + d];
      }
      for (int splits = 1; splits <= decode_split::kMaxSplits; ++splits) {
        // The workspace's layout for one query and head: parts' outputs
        // head_dim apart, their log-sum-exps one apart.
        std::vector<float> part_out(static_cast<std::size_t>(splits) * head_dim), part_lse(splits);
        for (int s = 0; s < splits; ++s) {
          attend_part(scores, values, head_dim, decode_split::key_split(0, keys, s, splits), &part_out[s * head_dim],
                      &part_lse[s]);
        }
        for (int d = 0; d < head_dim; ++d) {
          const float merged = decode_split::merge_splits(part_lse.data(), 1, &part_out[d], head_dim, splits);
          ASSERT_TRUE(std::isfinite(merged)) << keys << " keys, " << splits << " splits";
          EXPECT_NEAR(merged, whole[d] / sum, 2e-6)
              << keys << " keys, spread " << spread << ", " << splits << " splits, dim " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace midtune::engine
