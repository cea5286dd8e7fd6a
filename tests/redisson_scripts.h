// Redisson's own lock scripts, reproduced from its source (redisson/redisson:
// RedissonLock, RedissonFencedLock, RedissonFairLock; the 3.2x forms whose
// unlock takes the publish command as an argument) so that tests can run them
// with EVAL as a foreign owner next to relock on the same lock.
// tests/data_model_test.cc keeps the older form, whose unlock always PUBLISHes.

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

// RFairLock's acquire (the waiting form, EVAL_LONG). KEYS[1] lock, KEYS[2]
// queue, KEYS[3] timeouts; ARGV[1] lease ms, ARGV[2] owner field, ARGV[3]
// threadWaitTime ms, ARGV[4] the client's clock in ms. nil when taken, else
// the time to wait.
inline constexpr char kRedissonFairAcquire[] =
    "while true do "
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);"
    "if firstThreadId2 == false then break; end;"
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));"
    "if timeout <= tonumber(ARGV[4]) then "
    "redis.call('zrem', KEYS[3], firstThreadId2);"
    "redis.call('lpop', KEYS[2]);"
    "else break; end; end;"
    "if (redis.call('exists', KEYS[1]) == 0) "
    "and ((redis.call('exists', KEYS[2]) == 0) "
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then "
    "redis.call('lpop', KEYS[2]);"
    "redis.call('zrem', KEYS[3], ARGV[2]);"
    "local keys = redis.call('zrange', KEYS[3], 0, -1);"
    "for i = 1, #keys, 1 do "
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);"
    "end;"
    "redis.call('hset', KEYS[1], ARGV[2], 1);"
    "redis.call('pexpire', KEYS[1], ARGV[1]);"
    "return nil; end;"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "redis.call('hincrby', KEYS[1], ARGV[2],1);"
    "redis.call('pexpire', KEYS[1], ARGV[1]);"
    "return nil; end;"
    "while true do "
    "local firstThreadId = redis.call('lindex', KEYS[2], 0);"
    "if (firstThreadId == false) or (firstThreadId == ARGV[2]) then break; "
    "end;"
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId));"
    "if (timeout > tonumber(ARGV[4])) and "
    "(redis.call('exists', KEYS[1]) == 0) then "
    "redis.call('lpop', KEYS[2]);"
    "redis.call('zrem', KEYS[3], firstThreadId);"
    "else break; end; end;"
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);"
    "if timeout ~= false then "
    "return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]); end;"
    "local lastThreadId = redis.call('lindex', KEYS[2], -1);"
    "local ttl;"
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] then "
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - "
    "tonumber(ARGV[4]);"
    "else ttl = redis.call('pttl', KEYS[1]); end;"
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);"
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then "
    "redis.call('rpush', KEYS[2], ARGV[2]); end;"
    "return ttl;";

// RFairLock's unlock. KEYS[1] lock, KEYS[2] queue, KEYS[3] timeouts, KEYS[4]
// channel; ARGV[1] unlock message, ARGV[2] lease ms, ARGV[3] owner field,
// ARGV[4] the client's clock in ms. Publishes on "<KEYS[4]>:<next waiter>".
inline constexpr char kRedissonFairUnlock[] =
    "while true do "
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);"
    "if firstThreadId2 == false then break; end; "
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));"
    "if timeout <= tonumber(ARGV[4]) then "
    "redis.call('zrem', KEYS[3], firstThreadId2); "
    "redis.call('lpop', KEYS[2]); "
    "else break; end; end;"
    "if (redis.call('exists', KEYS[1]) == 0) then "
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); "
    "if nextThreadId ~= false then "
    "redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); "
    "end; return 1; end;"
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; end; "
    "redis.call('del', KEYS[1]); "
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); "
    "if nextThreadId ~= false then "
    "redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); "
    "end; return 1; ";

// RFairLock's acquireFailed: a waiter that gives up. KEYS[1] queue, KEYS[2]
// timeouts; ARGV[1] owner field, ARGV[2] threadWaitTime ms.
inline constexpr char kRedissonFairAcquireFailed[] =
    "local queue = redis.call('lrange', KEYS[1], 0, -1);"
    "local i = 1;"
    "while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1; end;"
    "i = i + 1;"
    "while i <= #queue do "
    "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);"
    "i = i + 1; end;"
    "redis.call('zrem', KEYS[2], ARGV[1]);"
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);";

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_REDISSON_SCRIPTS_H_
