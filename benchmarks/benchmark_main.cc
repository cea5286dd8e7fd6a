// main() of every benchmark binary (instead of Google Benchmark's
// benchmark_main): a benchmark is a program of its own, so it ignores
// SIGPIPE for the whole process before it runs. The baselines' raw
// connections (tests/testing/raw_connection.h, `suppress_sigpipe = false`)
// and the leader/follower reference write to sockets without blocking the
// signal, which would cost them system calls per call; a server that goes
// away mid-run (on a unix socket, say) then fails their calls with EPIPE
// instead of killing the benchmark. (relock itself never changes a
// process's signal dispositions: lib/common/sigpipe.h.)

#include <signal.h>

#include "benchmark/benchmark.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
