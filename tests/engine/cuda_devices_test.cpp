// `ga-run devices` and `backend.device: cuda` on whatever machine runs the
// tests: without a GPU (or without CUDA in the build) the report says why and
// device: cuda is a clear configuration error; with one, it is listed.
#include "backends/engine/devices/cuda/devices.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace midtune::engine {
namespace {

using ::testing::HasSubstr;

TEST(CudaDevices, ReportListsDevicesOrSaysWhyNone) {
  const CudaDeviceReport report = cuda_devices();
  const std::string text = describe(report);
  if (report.devices.empty()) {
    EXPECT_FALSE(report.why_none.empty());
    EXPECT_THAT(text, HasSubstr("no CUDA devices: "));
  } else {
    for (const CudaDevice& d : report.devices) {
      EXPECT_THAT(text, HasSubstr(d.name));
      EXPECT_GT(d.memory_bytes, 0u);
      EXPECT_GE(d.compute_major, 5);
    }
  }
}

TEST(CudaDevices, DeviceChoiceIsCheckedBeforeAnythingLoads) {
  EXPECT_NO_THROW(require_device("cpu"));
  EXPECT_THAT([] { require_device("tpu"); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("'tpu' is not one of cpu, cuda")));
  // cuda is refused, with the reason, exactly where there is no device to run on.
  if (cuda_devices().devices.empty()) {
    EXPECT_THAT([] { require_device("cuda"); },
                ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("backend.device: 'cuda': ")));
  } else {
    EXPECT_NO_THROW(require_device("cuda"));
  }
}

}  // namespace
}  // namespace midtune::engine
