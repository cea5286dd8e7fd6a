// Redisson's own lock scripts, reproduced from its source (redisson/redisson:
// RedissonLock, RedissonFencedLock; the 3.2x forms whose unlock takes the
// publish command as an argument) so that tests can run them with EVAL as a
// foreign owner next to relock on the same lock. tests/data_model_test.cc
// keeps the older form, whose unlock always PUBLISHes.

#ifndef RELOCK_TESTS_REDISSON_SCRIPTS_H_
#define RELOCK_TESTS_REDISSON_SCRIPTS_H_

namespace relock {
namespace testing {

// KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner field. nil when taken, else
// the holder's PTTL.
inline constexpr char kRedissonLock[] =
    "if ((redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; "
    "return redis.call('pttl', KEYS[1]);";

// KEYS[1] lock, KEYS[2] channel; ARGV[1] unlock message, ARGV[2] lease ms,
// ARGV[3] owner field, ARGV[4] publish command (PUBLISH or SPUBLISH). nil
// when not the owner, 0 when holds remain, 1 when freed (and published).
inline constexpr char kRedissonUnlock[] =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; "
    "end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; else redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); return 1; end; return nil;";

// RFencedLock's acquire. KEYS[1] lock, KEYS[2] token counter; ARGV as
// kRedissonLock. {-1, token} when taken, else {PTTL, -1}.
inline constexpr char kRedissonFencedAcquire[] =
    "if (redis.call('exists', KEYS[1]) == 0 "
    "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then "
    "local token = redis.call('incr', KEYS[2]);"
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return {-1, token}; "
    "end; "
    "return {redis.call('pttl', KEYS[1]), -1};";

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_REDISSON_SCRIPTS_H_
