// End-to-end tests of the relock command (tools/relock/) with semaphores:
// run --permits (one permit of a permit-expirable semaphore held while the
// command runs: the exit codes, a killed command, a removed permit, an
// explicit lease, never more than N at once) and status of semaphores. The
// fixture is tests/cli_test_util.h.

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli_test_util.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::Gone;
using ::relock::testing::Lines;
using ::relock::testing::ReadFile;
using ::relock::testing::RedisValue;
using ::relock::testing::Relock;
using ::relock::testing::Touch;
using ::relock::testing::ValidJsonText;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CliSemaphoreTest : public testing::CliTest {
 protected:
  // The semaphore's count at `name_` ("" when absent) and the permits out
  // ("{name_}:timeout"'s size), as Redis holds them.
  std::string Count() {
    absl::StatusOr<RedisValue> v = redis().Command({"GET", name_});
    return v.ok() && v->is_string() ? v->str : "";
  }
  int64_t PermitsOut() {
    absl::StatusOr<RedisValue> v =
        redis().Command({"ZCARD", absl::StrCat("{", name_, "}:timeout")});
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
};

TEST_F(CliSemaphoreTest,
       RunPermitsHoldsOnePermitWhileTheCommandRunsThenGivesItBack) {
  Relock& r = Start(RunArgs({"--permits", "3"}, WaitForGo("a")));
  CommandPid("a");
  // Held while CMD runs: seen in Redis and by a second relock.
  EXPECT_EQ(Count(), "2");
  EXPECT_EQ(PermitsOut(), 1);
  Relock& status = RunToEnd({"status", name_});
  EXPECT_EQ(status.Wait(), 0) << status.err();
  EXPECT_THAT(status.out(),
              StartsWith(name_ + ": permit-expirable semaphore, available 2, "
                                 "out 1, waiters 0\n  permit "));
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_EQ(Count(), "3");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliSemaphoreTest, RunPermitsExitCodesMatchTheLocks) {
  EXPECT_EQ(
      RunToEnd(RunArgs({"--permits", "2"}, {"sh", "-c", "exit 3"})).Wait(), 3);
  // The total is 2 now: another N is refused, and nothing changes.
  Relock& other = RunToEnd(RunArgs({"--permits", "5"}, {"true"}));
  EXPECT_EQ(other.Wait(), 2);
  EXPECT_THAT(other.err(), HasSubstr("2 permits in all"));
  EXPECT_EQ(Lines(other.err()).size(), 1u) << other.err();
  EXPECT_EQ(Count(), "2");
  for (const char* bad : {"0", "-1", "x", "2147483648"}) {
    Relock& r = RunToEnd(RunArgs({"--permits", bad}, {"true"}));
    EXPECT_EQ(r.Wait(), 2) << bad;
    EXPECT_THAT(r.err(), HasSubstr("--permits")) << bad;
  }
  // Both permits held: --nonblock and a short --wait find none (75).
  Relock& a = Start(RunArgs({"--permits", "2"}, WaitForGo("a")));
  CommandPid("a");
  Relock& b = Start(RunArgs({"--permits", "2"}, WaitForGo("b")));
  CommandPid("b");
  Relock& nonblock =
      RunToEnd(RunArgs({"--permits", "2", "--nonblock"}, {"true"}));
  EXPECT_EQ(nonblock.Wait(), 75);
  EXPECT_THAT(nonblock.err(), HasSubstr("no free permit"));
  Relock& waited =
      RunToEnd(RunArgs({"--permits", "2", "--wait", "300ms"}, {"true"}));
  EXPECT_EQ(waited.Wait(), 75);
  Touch(Path("a.go"));
  Touch(Path("b.go"));
  EXPECT_EQ(a.Wait(), 0) << a.err();
  EXPECT_EQ(b.Wait(), 0) << b.err();
  EXPECT_EQ(RunToEnd(RunArgs({"--permits", "2"}, {"/no/such/command"})).Wait(),
            127);
  EXPECT_EQ(Count(), "2");
}

TEST_F(CliSemaphoreTest,
       RunPermitsCommandKilledBySignalExits128PlusNAndFreesThePermit) {
  EXPECT_EQ(
      RunToEnd(RunArgs({"--permits", "1"}, {"sh", "-c", "kill -9 $$"})).Wait(),
      128 + SIGKILL);
  EXPECT_EQ(Count(), "1");
  // A signal to relock goes to CMD, which dies of it.
  Relock& r = Start(RunArgs({"--permits", "1"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  r.Signal(SIGTERM);
  EXPECT_EQ(r.Wait(), 128 + SIGTERM) << r.err();
  EXPECT_TRUE(Gone(command));
  EXPECT_EQ(Count(), "1");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliSemaphoreTest,
       RunPermitsRemovedPermitTerminatesTheCommandAndExits76) {
  Relock& r = Start(RunArgs({"--permits", "2", "--watchdog-timeout", "1500ms"},
                            Sleeper("a")));
  const pid_t command = CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", absl::StrCat("{", name_, "}:timeout")}));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_TRUE(Gone(command));
  ASSERT_EQ(Lines(r.err()).size(), 1u) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost permit "));
  EXPECT_THAT(r.err(), HasSubstr("of semaphore \"" + name_ + "\""));
  EXPECT_THAT(r.err(), HasSubstr("SIGTERM"));
}

TEST_F(CliSemaphoreTest,
       RunPermitsExplicitLeaseEndingBeforeTheCommandTerminatesIt) {
  Relock& r = Start(RunArgs({"--permits", "1", "--lease", "2s"}, Sleeper("a")));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost permit "));
  EXPECT_THAT(r.err(), HasSubstr("lease of 2s ran out"));
  // Its lease ends (relock's own reckoning ended it a little earlier): the
  // next run gets the permit back.
  Relock& next =
      RunToEnd(RunArgs({"--permits", "1", "--wait", "30s"}, {"true"}));
  EXPECT_EQ(next.Wait(), 0) << next.err();
}

TEST_F(CliSemaphoreTest, RunPermitsNeverRunsMoreThanNCommandsAtOnce) {
  // Each command logs "start" after relock took its permit and "end" before
  // relock gives it back (appends of a line are atomic): counted in log
  // order, never more than 2 run at once.
  const std::vector<std::string> command = {
      "sh", "-c",
      absl::StrCat("echo start >> ", Path("log"), "; sleep 0.1; echo end >> ",
                   Path("log"))};
  constexpr int kRuns = 6;
  std::vector<Relock*> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.push_back(&Start(RunArgs({"--permits", "2"}, command)));
  }
  for (Relock* r : runs) EXPECT_EQ(r->Wait(), 0) << r->err();
  int running = 0;
  int most = 0;
  int starts = 0;
  for (const std::string& line : Lines(ReadFile(Path("log")))) {
    if (line == "start") {
      ++starts;
      most = std::max(most, ++running);
    } else {
      EXPECT_EQ(line, "end");
      --running;
    }
  }
  EXPECT_EQ(starts, kRuns);
  EXPECT_EQ(running, 0);
  EXPECT_LE(most, 2);
  EXPECT_EQ(Count(), "2");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliSemaphoreTest, StatusShowsSemaphorePermitsAndTheirLeases) {
  // A plain Semaphore: a count.
  const std::string plain = name_ + ":plain";
  ASSERT_OK(redis().Command({"SET", plain, "4"}));
  Relock& text = RunToEnd({"status", plain});
  EXPECT_EQ(text.Wait(), 0) << text.err();
  EXPECT_EQ(text.out(), plain + ": semaphore, available 4, waiters 0\n");
  Relock& json = RunToEnd({"status", "--json", plain});
  EXPECT_EQ(json.Wait(), 0) << json.err();
  EXPECT_EQ(json.out(),
            absl::StrCat("[{\"name\":\"", plain,
                         "\",\"state\":\"semaphore\",\"type\":\"semaphore\","
                         "\"available\":4,\"permits_out\":0,\"waiters\":0,"
                         "\"permits\":[]}]\n"));
  // A permit-expirable one: a permit held by relock run, one whose lease is
  // over (not given back yet), one without a lease (Redisson's).
  Relock& holder = Start(RunArgs({"--permits", "4"}, WaitForGo("a")));
  CommandPid("a");
  const std::string timeouts = absl::StrCat("{", name_, "}:timeout");
  ASSERT_OK(redis().Command({"ZADD", timeouts, "1000", "abcdefghijklmnop"}));
  ASSERT_OK(redis().Command(
      {"ZADD", timeouts, "922337203685477", "ABCDEFGHIJKLMNOP"}));
  ASSERT_OK(redis().Command({"DECRBY", name_, "2"}));
  Relock& sem = RunToEnd({"status", name_, plain});
  EXPECT_EQ(sem.Wait(), 0) << sem.err();
  const std::vector<std::string> lines = Lines(sem.out());
  ASSERT_EQ(lines.size(), 5u) << sem.out();
  EXPECT_EQ(lines[0], name_ +
                          ": permit-expirable semaphore, available 1, out 3, "
                          "waiters 0");
  EXPECT_THAT(lines[1], StartsWith("  permit 6162636465666768696a6b6c6d6e6f70  "
                                   "expired "));
  EXPECT_THAT(lines[2], StartsWith("  permit "));
  EXPECT_THAT(lines[2], HasSubstr("  lease "));
  EXPECT_EQ(lines[3], "  permit 4142434445464748494a4b4c4d4e4f50  no lease");
  EXPECT_EQ(lines[4], plain + ": semaphore, available 4, waiters 0");
  Relock& sem_json = RunToEnd({"status", "--json", name_});
  EXPECT_EQ(sem_json.Wait(), 0) << sem_json.err();
  EXPECT_THAT(sem_json.out(),
              HasSubstr("\"type\":\"permit-expirable\",\"available\":1,"
                        "\"permits_out\":3,\"waiters\":0,\"permits\":[{\"id\":"
                        "\"6162636465666768696a6b6c6d6e6f70\",\"lease_end\":"
                        "\"1970-01-01T00:00:01.000Z\",\"lease_end_ms\":1000,"));
  EXPECT_THAT(sem_json.out(),
              HasSubstr("{\"id\":\"4142434445464748494a4b4c4d4e4f50\","
                        "\"lease_end\":null,\"lease_end_ms\":null,"
                        "\"remaining_lease_ms\":null}]}]"));
  EXPECT_TRUE(ValidJsonText(sem_json.out())) << sem_json.out();
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0) << holder.err();
  // A string that is no count is still neither (exit 1).
  ASSERT_OK(redis().Command({"SET", plain, "four"}));
  Relock& wrong = RunToEnd({"status", plain});
  EXPECT_EQ(wrong.Wait(), 1);
  EXPECT_THAT(wrong.err(), HasSubstr("string"));
}

}  // namespace
}  // namespace relock
