// Uses an installed relock the way an outside project would: includes the
// umbrella header, links the library and calls it. Connecting to a closed
// port must fail with Unavailable, which proves the library (and its
// dependencies) linked and ran.
#include <iostream>

#include "relock/relock.h"

int main() {
  relock::ClientOptions options;
  options.url = "redis://127.0.0.1:1";  // nothing listens on port 1
  options.connect_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<relock::Client>> client =
      relock::Client::Connect(options);
  if (client.ok() || client.status().code() != absl::StatusCode::kUnavailable) {
    std::cerr << "unexpected: " << client.status() << "\n";
    return 1;
  }
  std::cout << "relock " << relock::kVersionString
            << " linked; Connect said: " << client.status() << "\n";
  return 0;
}
