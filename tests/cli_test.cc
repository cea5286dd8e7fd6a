// End-to-end tests of the relock command (tools/relock/) with locks: run,
// status, list, unlock, the exit codes, signals, usage errors, the defects
// of issue 23. The fixture (the real binary against a real redis-server)
// is tests/cli_test_util.h; run --permits and the semaphores' status are in
// cli_semaphore_test.cc.

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli_test_util.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::CliTest;
using ::relock::testing::Eventually;
using ::relock::testing::Gone;
using ::relock::testing::HostName;
using ::relock::testing::Lines;
using ::relock::testing::ReadFile;
using ::relock::testing::RedisServer;
using ::relock::testing::Relock;
using ::relock::testing::Touch;
using ::relock::testing::ValidJsonText;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(CliTest, TwoRunsOnOneNameSerialize) {
  Relock& a = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");  // a holds the lock and runs
  Relock& b = Start(RunArgs({}, WaitForGo("b")));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; })) << "b does not wait";
  EXPECT_FALSE(b.Exited());
  EXPECT_EQ(ReadFile(Path("log")), "start\n");  // b's command did not start
  Touch(Path("a.go"));
  EXPECT_EQ(a.Wait(), 0) << a.err();
  CommandPid("b");
  Touch(Path("b.go"));
  EXPECT_EQ(b.Wait(), 0) << b.err();
  EXPECT_EQ(ReadFile(Path("log")), "start\nend\nstart\nend\n");
  EXPECT_FALSE(Exists(name_));
}

// A release whose unlock message Redis refused (an ACL user without
// PUBLISH) did free the lock: the warning says so, and no longer adds that
// the lock frees itself when its lease ends (found by a review).
TEST_F(CliTest, AReleaseWhosePublishWasRefusedWarnsWithoutALeaseNote) {
  ASSERT_OK(redis().Command({"ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*",
                             "+@all", "-publish"}));
  runs_.push_back(Relock::Start(
      dir_,
      {"--url", absl::StrCat("redis://nopub:pw@127.0.0.1:", redis().port()),
       "run", "--nonblock", name_, "--", "true"}));
  Relock& r = *runs_.back();
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_THAT(r.err(), HasSubstr("warning: "));
  EXPECT_THAT(r.err(), HasSubstr("publish"));
  EXPECT_THAT(r.err(), Not(HasSubstr("when its lease ends")));
  EXPECT_FALSE(Exists(name_));
  ASSERT_OK(redis().Command({"ACL", "DELUSER", "nopub"}));
}

TEST_F(CliTest, BusyLockExits75WithNonblockAndWhenTheWaitRunsOut) {
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  testing::Stopwatch watch;
  Relock& nonblock = RunToEnd(RunArgs({"--nonblock"}, {"true"}));
  EXPECT_EQ(nonblock.Wait(), 75);
  EXPECT_THAT(nonblock.err(), HasSubstr("busy"));
  EXPECT_EQ(Lines(nonblock.err()).size(), 1u) << nonblock.err();
  Relock& waited = RunToEnd(RunArgs({"--wait", "300ms"}, {"true"}));
  EXPECT_EQ(waited.Wait(), 75);
  EXPECT_THAT(waited.err(), HasSubstr("busy"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(30));  // prompt, not a long wait
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0);
}

TEST_F(CliTest, KilledRunnerFreesTheLockWithinALeaseAndItsCommandDies) {
  Relock& a = Start(RunArgs({"--watchdog-timeout", "2s"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  Relock& b = Start(RunArgs({}, {"sh", "-c", "echo b > " + Path("b.ran")}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));
  a.Signal(SIGKILL);
  EXPECT_EQ(a.Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Eventually([&] { return Gone(command); }, absl::Seconds(30)))
      << "the command outlived relock";
  EXPECT_EQ(b.Wait(absl::Seconds(30)), 0) << b.err();
  EXPECT_EQ(ReadFile(Path("b.ran")), "b\n");
}

TEST_F(CliTest, DeletedKeyTerminatesTheCommandAndExits76) {
  Relock& r = Start(RunArgs({"--watchdog-timeout", "1500ms"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", name_}));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_TRUE(Gone(command));
  ASSERT_EQ(Lines(r.err()).size(), 1u) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost lock \"" + name_ + "\""));
  EXPECT_THAT(r.err(), HasSubstr("SIGTERM"));
}

TEST_F(CliTest, OnLostIgnoreLetsTheCommandFinishButExits76) {
  Relock& r = Start(RunArgs(
      {"--watchdog-timeout", "1500ms", "--on-lost", "ignore"}, WaitForGo("a")));
  CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", name_}));
  // A whole line (the message once came in two writes, and a reader could
  // see "relock: " alone).
  EXPECT_TRUE(Eventually([&] { return absl::StrContains(r.err(), "\n"); },
                         absl::Seconds(30)));
  EXPECT_THAT(r.err(), HasSubstr("--on-lost ignore"));
  EXPECT_FALSE(r.Exited());  // the command runs on
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 76) << r.err();
  EXPECT_EQ(ReadFile(Path("log")), "start\nend\n");  // it finished
}

TEST_F(CliTest, ExplicitLeaseEndingBeforeTheCommandTerminatesIt) {
  Relock& r = Start(RunArgs({"--lease", "2s", "--grace", "10s"}, Sleeper("a")));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_THAT(r.err(), HasSubstr("lease of 2s ran out"));
  // On a slow machine the lease may end before the command wrote its pid.
  int64_t command = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(Path("a.pid"))),
                       &command)) {
    EXPECT_TRUE(Gone(static_cast<pid_t>(command)));
  }
}

TEST_F(CliTest, CommandStatusIsPassedThrough) {
  EXPECT_EQ(RunToEnd(RunArgs({}, {"sh", "-c", "exit 3"})).Wait(), 3);
  EXPECT_EQ(RunToEnd(RunArgs({}, {"sh", "-c", "kill -9 $$"})).Wait(), 137);
  Relock& ok = RunToEnd(RunArgs({}, {"sh", "-c", "echo hello"}));
  EXPECT_EQ(ok.Wait(), 0);
  EXPECT_EQ(ok.out(), "hello\n");
  EXPECT_FALSE(Exists(name_));  // released
}

TEST_F(CliTest, SignalsAreForwardedToTheCommand) {
  Relock& r = Start(
      RunArgs({}, {"sh", "-c",
                   absl::StrCat("trap 'echo term > ", Path("got"),
                                "; exit 0' TERM; ", "echo $$ > ", Path("a.pid"),
                                "; while true; do sleep 0.02; done")}));
  CommandPid("a");
  r.Signal(SIGTERM);
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_EQ(ReadFile(Path("got")), "term\n");
  EXPECT_FALSE(Exists(name_));
}

TEST_F(CliTest, MissingOrUnexecutableCommand) {
  Relock& missing = RunToEnd(RunArgs({}, {"/no/such/command"}));
  EXPECT_EQ(missing.Wait(), 127);
  EXPECT_THAT(missing.err(), HasSubstr("not found"));
  const std::string file = Path("not-executable");
  Touch(file);
  EXPECT_EQ(RunToEnd(RunArgs({}, {file})).Wait(), 126);
  EXPECT_FALSE(Exists(name_));
}

TEST_F(CliTest, StatusAndListShowTheHolderHostPidAndWaiters) {
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  Relock& waiter = Start(RunArgs({}, {"true"}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));

  Relock& text = RunToEnd({"status", name_});
  EXPECT_EQ(text.Wait(), 0) << text.err();
  EXPECT_THAT(text.out(), StartsWith(name_ + ": held (lock), lease "));
  EXPECT_THAT(text.out(), HasSubstr("waiters 1"));
  EXPECT_THAT(text.out(), HasSubstr(absl::StrCat("host ", HostName(), "  pid ",
                                                 holder.pid())));
  Relock& json = RunToEnd({"status", "--json", name_});
  EXPECT_EQ(json.Wait(), 0) << json.err();
  EXPECT_THAT(json.out(),
              StartsWith("[{\"name\":\"" + name_ +
                         "\",\"state\":\"held\",\"type\":\"lock\""));
  const std::string holder_json =
      absl::StrCat("\"hold_count\":1,\"write\":false,\"host\":\"", HostName(),
                   "\",\"pid\":", holder.pid(), ",");
  EXPECT_THAT(json.out(), HasSubstr(holder_json));
  EXPECT_THAT(json.out(), HasSubstr("\"waiters\":1,"));
  Relock& list = RunToEnd({"list", "--json", "relock-test:*"});
  EXPECT_EQ(list.Wait(), 0) << list.err();
  EXPECT_THAT(list.out(), StartsWith("[{\"name\":\"" + name_ + "\","));
  EXPECT_THAT(list.out(), HasSubstr(holder_json));
  EXPECT_EQ(Lines(list.out()).size(), 1u) << list.out();  // one lock
  Relock& list_text = RunToEnd({"list"});
  EXPECT_THAT(list_text.out(), HasSubstr(absl::StrCat("pid ", holder.pid())));
  Relock& free = RunToEnd({"status", name_ + ":other"});
  EXPECT_EQ(free.out(), name_ + ":other: free, waiters 0\n");

  ASSERT_OK(redis().Command({"SET", "not-a-lock", "x"}));
  Relock& wrong = RunToEnd({"status", "not-a-lock", name_});
  EXPECT_EQ(wrong.Wait(), 1);
  EXPECT_THAT(wrong.err(), HasSubstr("string"));
  EXPECT_THAT(wrong.out(), StartsWith(name_ + ": held"));
  // run on it: exit 1 and what the key holds (it was 69 and Redis's
  // WRONGTYPE with the script's sha), the command not run.
  Relock& run_wrong =
      RunToEnd({"run", "--nonblock", "not-a-lock", "--", "touch", Path("ran")});
  EXPECT_EQ(run_wrong.Wait(), 1);
  EXPECT_THAT(run_wrong.err(), HasSubstr("holds a string that is not a lock"));
  EXPECT_FALSE(std::filesystem::exists(Path("ran")));

  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0);
  EXPECT_EQ(waiter.Wait(), 0);
  Relock& empty = RunToEnd({"list"});
  EXPECT_EQ(empty.Wait(), 0);
  EXPECT_EQ(empty.out(), "");
}

TEST_F(CliTest, JsonEscapesNames) {
  const std::string name = "we\"ird\\name\tx";
  Relock& r = RunToEnd({"status", "--json", name});
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_THAT(r.out(), StartsWith("[{\"name\":\"we\\\"ird\\\\name\\tx\","));
}

TEST_F(CliTest, ForcedUnlockFreesTheLockAndWakesAWaitingRun) {
  Relock& holder = Start(RunArgs({"--watchdog-timeout", "2s"}, WaitForGo("a")));
  CommandPid("a");
  Relock& waiter =
      Start(RunArgs({}, {"sh", "-c", "echo b > " + Path("b.ran")}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));

  Relock& refused = RunToEnd({"unlock", name_});
  EXPECT_EQ(refused.Wait(), 2);
  Relock& not_tty = RunToEnd({"unlock", "--force", name_});
  EXPECT_EQ(not_tty.Wait(), 2);
  EXPECT_THAT(not_tty.err(), HasSubstr("--yes"));
  EXPECT_FALSE(waiter.Exited());

  Relock& unlock = RunToEnd({"unlock", "--force", "--yes", name_});
  EXPECT_EQ(unlock.Wait(), 0) << unlock.err();
  EXPECT_THAT(unlock.out(), StartsWith("released lock " + name_));
  EXPECT_THAT(unlock.out(), HasSubstr(absl::StrCat("pid ", holder.pid())));
  EXPECT_EQ(waiter.Wait(absl::Seconds(30)), 0) << waiter.err();
  EXPECT_EQ(ReadFile(Path("b.ran")), "b\n");
  // The holder learns that it lost the lock.
  EXPECT_EQ(holder.Wait(absl::Seconds(30)), 76) << holder.err();
  Relock& again = RunToEnd({"unlock", "--force", "--yes", name_});
  EXPECT_EQ(again.out(), "lock " + name_ + " was not held\n");
}

// The question on a terminal: script(1) (util-linux, in every Debian) gives
// relock a pseudo-terminal and types what the answer file holds.
TEST_F(CliTest, UnlockAsksOnATerminal) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1)";
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  auto ask = [&](const std::string& answer) -> Relock& {
    const std::string input = Path("answer");
    std::ofstream(input) << answer << "\n";
    const std::string command = absl::StrCat(
        RELOCK_CLI_PATH, " --url ", redis().url(), " unlock --force ", name_);
    runs_.push_back(Relock::StartProgram(
        dir_, "/usr/bin/script", {"-qec", command, "/dev/null"}, input));
    EXPECT_GE(runs_.back()->Wait(), 0);
    return *runs_.back();
  };
  Relock& no = ask("n");
  EXPECT_EQ(no.Wait(), 1) << no.out();
  EXPECT_THAT(no.out(), HasSubstr("Force-release lock " + name_ + " held by "));
  EXPECT_THAT(no.out(), HasSubstr("not released"));
  EXPECT_TRUE(Exists(name_));
  Relock& yes = ask("y");
  EXPECT_EQ(yes.Wait(), 0) << yes.out();
  EXPECT_THAT(yes.out(), HasSubstr("released lock " + name_));
  EXPECT_FALSE(Exists(name_));
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 76) << holder.err();  // its release finds it gone
}

TEST_F(CliTest, UsageErrorsExit2WithOneLine) {
  const std::vector<std::vector<std::string>> bad = {
      RunArgs({"--bogus"}, {"true"}),
      RunArgs({"--wait", "ten"}, {"true"}),
      RunArgs({"--lease", "-1s"}, {"true"}),
      RunArgs({"--on-lost", "maybe"}, {"true"}),
      {"run", name_},
      {"run"},
      {"frobnicate"},
      {"status"},
      {"list", "--nope"},
  };
  for (const std::vector<std::string>& args : bad) {
    Relock& r = RunToEnd(args);
    EXPECT_EQ(r.Wait(), 2) << args[0] << " " << r.err();
    EXPECT_EQ(Lines(r.err()).size(), 1u) << r.err();
    EXPECT_THAT(r.err(), StartsWith("relock: "));
  }
  for (const char* url : {"foo://x", "redis://127.0.0.1:notaport"}) {
    runs_.push_back(Relock::Start(dir_, {"--url", url, "status", name_}));
    EXPECT_EQ(runs_.back()->Wait(), 2) << runs_.back()->err();
    EXPECT_EQ(Lines(runs_.back()->err()).size(), 1u) << runs_.back()->err();
  }
  // The library's bounds: a lease over 365 days.
  EXPECT_EQ(RunToEnd(RunArgs({"--lease", "10000h"}, {"true"})).Wait(), 2);
}

// Issue 23, defect 14: `relock run -- -NAME -- CMD`, the only way to pass a
// name that starts with "-", ran "--" as the command (exit 127).
TEST_F(CliTest, DashNameAfterDoubleDashRanTheDoubleDashAsTheCommand) {
  const std::string name = "-" + name_;
  Relock& r =
      Start({"run", "--", name, "--", "sh", "-c",
             absl::StrCat("echo $$ > ", Path("a.pid"), "; while [ ! -e ",
                          Path("a.go"), " ]; do sleep 0.02; done")});
  CommandPid("a");
  EXPECT_TRUE(Exists(name)) << r.err();
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_FALSE(Exists(name));
  // Without the second "--" the command follows the name directly.
  Relock& plain = RunToEnd({"run", "--", name, "sh", "-c", "exit 4"});
  EXPECT_EQ(plain.Wait(), 4) << plain.err();
}

// Issue 23, defect 15: `--grace inf` (or 3000000h) overflowed the SIGKILL
// time into the past, so the command was killed at once, and the message
// said "SIGKILL follows in inf". Now such a grace never sends SIGKILL.
TEST_F(CliTest, InfiniteGraceSentSigkillAtOnce) {
  for (const char* grace : {"inf", "3000000h"}) {
    SCOPED_TRACE(grace);
    const std::string tag = absl::StrCat("g", grace);
    const std::string log = Path(tag + ".log");
    // A command that notes SIGTERM and runs on until told to stop.
    Relock& r = Start(RunArgs(
        {"--lease", "1s", "--grace", grace},
        {"sh", "-c",
         absl::StrCat("trap 'echo term >> ", log, "' TERM; echo $$ > ",
                      Path(tag + ".pid"), "; while [ ! -e ", Path(tag + ".go"),
                      " ]; do sleep 0.02; done; echo end >> ", log)}));
    const pid_t command = CommandPid(tag);
    // Had SIGKILL followed SIGTERM at once, the trap would never run.
    EXPECT_TRUE(Eventually([&] { return ReadFile(log) == "term\n"; },
                           absl::Seconds(30)))
        << r.err();
    EXPECT_THAT(r.err(), HasSubstr("no SIGKILL follows"));
    EXPECT_FALSE(Gone(command));
    Touch(Path(tag + ".go"));
    EXPECT_EQ(r.Wait(), 76) << r.err();
    EXPECT_EQ(ReadFile(log), "term\nend\n");
  }
}

// Issue 23, defect 16: `list --json` wrote a name with byte 0xff as it was,
// so the output was not valid UTF-8, hence not JSON. Bytes that are not
// UTF-8 become U+FFFD, and name_base64 carries the exact name.
TEST_F(CliTest, NonUtf8NameMadeListJsonInvalid) {
  const std::string name =
      name_ + "\xff\xc3(\xe2\x82\xac";  // 0xff, a bad pair, a euro sign
  std::unique_ptr<Client> client = testing::MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list", "--json", name_ + "*"},
                                             {"status", "--json", name}}) {
    Relock& r = RunToEnd(args);
    EXPECT_EQ(r.Wait(), 0) << r.err();
    const std::string out = r.out();
    EXPECT_TRUE(ValidJsonText(out)) << out;
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\"name\":\"", name_,
                                            "\\ufffd\\ufffd(\xe2\x82\xac\"")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\"name_base64\":\"",
                                            absl::Base64Escape(name), "\"")));
  }
  EXPECT_OK(lock.Release());
}

// Issue 23, defect 17: `relock status` with a 100 KB name exited 1 ("not a
// lock") instead of 2 (bad input).
TEST_F(CliTest, HugeNameExitedOneInsteadOfTwo) {
  Relock& r = RunToEnd({"status", std::string(100 * 1024, 'x'), name_});
  EXPECT_EQ(r.Wait(), 2) << r.err();
  EXPECT_EQ(Lines(r.err()).size(), 1u);
  EXPECT_EQ(r.out(), "");
}

TEST_F(CliTest, HelpAndVersion) {
  Relock& help = RunToEnd({"--help"});
  EXPECT_EQ(help.Wait(), 0);
  EXPECT_THAT(help.out(), HasSubstr("exit codes:"));
  EXPECT_THAT(help.out(), HasSubstr("76 "));
  for (const char* command : {"run", "status", "list", "unlock"}) {
    Relock& r = RunToEnd({command, "--help"});
    EXPECT_EQ(r.Wait(), 0);
    EXPECT_THAT(r.out(), StartsWith(absl::StrCat("usage: relock ", command)));
  }
  Relock& version = RunToEnd({"--version"});
  EXPECT_EQ(version.Wait(), 0);
  EXPECT_EQ(version.out(), absl::StrCat("relock ", kVersionString, "\n"));
}

TEST_F(CliTest, RedisDownExits69AndRelockUrlIsRead) {
  absl::StatusOr<std::unique_ptr<RedisServer>> down = RedisServer::Start();
  ASSERT_OK(down);
  const std::string url = (*down)->url();
  ASSERT_TRUE((*down)->Stop().ok());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--url", url, "status", name_},
           {"--url", url, "run", name_, "--", "true"},
           {"--url", url, "list"}}) {
    runs_.push_back(Relock::Start(dir_, args));
    EXPECT_EQ(runs_.back()->Wait(), 69) << runs_.back()->err();
    EXPECT_EQ(Lines(runs_.back()->err()).size(), 1u) << runs_.back()->err();
  }
  // $RELOCK_URL when there is no --url (the child inherits the variable).
  ASSERT_EQ(setenv("RELOCK_URL", redis().url().c_str(), 1), 0);
  runs_.push_back(Relock::Start(dir_, {"status", name_}));
  EXPECT_EQ(runs_.back()->Wait(), 0) << runs_.back()->err();
  ASSERT_EQ(unsetenv("RELOCK_URL"), 0);
  EXPECT_EQ(runs_.back()->out(), name_ + ": free, waiters 0\n");
}

}  // namespace
}  // namespace relock
