// Compiles and links against an installed relock (see scripts/check-install.sh).
#include <relock/relock.h>

int main() {
  relock::ClientOptions options;
  return options.url.empty() ? 1 : 0;
}
