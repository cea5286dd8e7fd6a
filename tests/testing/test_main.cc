// main() of every relock test binary (instead of gtest_main): first gives
// ChildProcess a chance to run a child routine (see child_process.h), then
// runs the tests.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"

int main(int argc, char** argv) {
  if (int rc = relock::testing::MaybeRunChildMain(argc, argv); rc >= 0) {
    return rc;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
