// A test parameterised by a kernel path (flash.hpp's FlashPath): each case runs with that path forced, or
// is skipped with a message where this CPU or build cannot run it; the path goes back to Auto after.
#pragma once
#include <gtest/gtest.h>

#include "qkv/flash.hpp"

namespace qkv {

class PathTest : public ::testing::TestWithParam<FlashPath> {
 protected:
  void SetUp() override {
    flash_force_path(FlashPath::Auto);
    if (!flash_path_supported(GetParam()))
      GTEST_SKIP() << "the " << flash_path_name(GetParam()) << " path cannot run on this CPU/build";
    flash_force_path(GetParam());
  }
  void TearDown() override { flash_force_path(FlashPath::Auto); }
};

}  // namespace qkv
