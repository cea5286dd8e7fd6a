// Uses relock from another Bazel workspace (see WORKSPACE): links the library
// and calls it. An unbound handle must fail with FailedPrecondition.
#include <iostream>

#include "relock/relock.h"

int main() {
  relock::Lock unbound;
  absl::Status status = unbound.Acquire();
  std::cout << "relock " << relock::kVersionString << " from Bazel: " << status
            << "\n";
  return status.code() == absl::StatusCode::kFailedPrecondition ? 0 : 1;
}
