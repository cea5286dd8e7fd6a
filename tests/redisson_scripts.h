// Redisson's own lock scripts, reproduced from its source (redisson/redisson:
// RedissonLock, RedissonFencedLock, RedissonFairLock, RedissonReadLock,
// RedissonWriteLock, RedissonSemaphore, RedissonCountDownLatch,
// RedissonPermitExpirableSemaphore (its 2024 form, whose permit ids are
// passed as their 16 bytes); the 3.2x forms whose
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

// RReadWriteLock's read lock acquire. KEYS[1] lock, KEYS[2] the reader's
// lease key prefix "{N}:<reader field>:rwlock_timeout"; ARGV[1] lease ms,
// ARGV[2] reader field, ARGV[3] its writer field ("<reader>:write"). nil when
// taken, else the holder's PTTL.
inline constexpr char kRedissonReadLock[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call('hset', KEYS[1], 'mode', 'read'); "
    "redis.call('hset', KEYS[1], ARGV[2], 1); "
    "redis.call('set', KEYS[2] .. ':1', 1); "
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; "
    "if (mode == 'read') or (mode == 'write' and "
    "redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "local key = KEYS[2] .. ':' .. ind;"
    "redis.call('set', key, 1); "
    "redis.call('pexpire', key, ARGV[1]); "
    "local remainTime = redis.call('pttl', KEYS[1]); "
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); "
    "return nil; end;"
    "return redis.call('pttl', KEYS[1]);";

// RReadWriteLock's read unlock (without the unlock-latch key, which only
// deduplicates Redisson's own retries). KEYS[1] lock, KEYS[2] channel,
// KEYS[3] the reader's lease key prefix, KEYS[4] the key prefix "{N}";
// ARGV[1] unlock message ("0"), ARGV[2] reader field, ARGV[3] publish
// command. nil when not a reader, 0 when still held, 1 when freed.
inline constexpr char kRedissonReadUnlock[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); return 1; end; "
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); "
    "if (lockExists == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); "
    "if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;"
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); "
    "if (redis.call('hlen', KEYS[1]) > 1) then "
    "local maxRemainTime = -3; "
    "local keys = redis.call('hkeys', KEYS[1]); "
    "for n, key in ipairs(keys) do "
    "counter = tonumber(redis.call('hget', KEYS[1], key)); "
    "if type(counter) == 'number' then "
    "for i=counter, 1, -1 do "
    "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. "
    "':rwlock_timeout:' .. i); "
    "maxRemainTime = math.max(remainTime, maxRemainTime);"
    "end; end; end; "
    "if maxRemainTime > 0 then "
    "redis.call('pexpire', KEYS[1], maxRemainTime); return 0; end;"
    "if mode == 'write' then return 0; end; end; "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); "
    "return 1; ";

// RReadWriteLock's write lock acquire. KEYS[1] lock; ARGV[1] lease ms,
// ARGV[2] writer field "<id>:<thread>:write". nil when taken, else the
// holder's PTTL.
inline constexpr char kRedissonWriteLock[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call('hset', KEYS[1], 'mode', 'write'); "
    "redis.call('hset', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; "
    "if (mode == 'write') then "
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "local currentExpire = redis.call('pttl', KEYS[1]); "
    "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); "
    "return nil; end; end;"
    "return redis.call('pttl', KEYS[1]);";

// RReadWriteLock's write unlock (without the unlock-latch key). KEYS[1]
// lock, KEYS[2] channel; ARGV[1] read-unlock message ("1"), ARGV[2] lease
// ms, ARGV[3] writer field, ARGV[4] publish command. nil when not the
// writer, 0 when holds remain, 1 when its last hold went.
inline constexpr char kRedissonWriteUnlock[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); return 1; end;"
    "if (mode == 'write') then "
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); "
    "if (lockExists == 0) then return nil; "
    "else local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; "
    "else redis.call('hdel', KEYS[1], ARGV[3]); "
    "if (redis.call('hlen', KEYS[1]) == 1) then "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "else redis.call('hset', KEYS[1], 'mode', 'read'); end; "
    "return 1; end; end; end; "
    "return nil;";

// RSemaphore's tryAcquire (one attempt). KEYS[1] semaphore; ARGV[1]
// permits. 1 when taken, else 0.
inline constexpr char kRedissonSemaphoreTryAcquire[] =
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
    "local val = redis.call('decrby', KEYS[1], ARGV[1]); "
    "return 1; end; "
    "return 0;";

// RSemaphore's release. KEYS[1] semaphore, KEYS[2] channel
// ("redisson_sc:{N}"); ARGV[1] permits. Publishes the new count.
inline constexpr char kRedissonSemaphoreRelease[] =
    "local value = redis.call('incrby', KEYS[1], ARGV[1]); "
    "redis.call('publish', KEYS[2], value); ";

// RSemaphore's trySetPermits. KEYS[1] semaphore, KEYS[2] channel; ARGV[1]
// permits. 1 when set, 0 when a count was there.
inline constexpr char kRedissonSemaphoreTrySetPermits[] =
    "local value = redis.call('get', KEYS[1]); "
    "if (value == false) then "
    "redis.call('set', KEYS[1], ARGV[1]); "
    "redis.call('publish', KEYS[2], ARGV[1]); "
    "return 1; end; "
    "return 0;";

// RCountDownLatch's trySetCount. KEYS[1] latch, KEYS[2] channel
// ("redisson_countdownlatch__channel__{N}"); ARGV[1] new-count message
// ("1"), ARGV[2] count, ARGV[3] publish command. 1 when set, else 0.
inline constexpr char kRedissonLatchTrySetCount[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('set', KEYS[1], ARGV[2]); "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); "
    "return 1 "
    "else "
    "return 0 "
    "end";

// RCountDownLatch's countDown. KEYS[1] latch, KEYS[2] channel; ARGV[1]
// zero-count message ("0"), ARGV[2] publish command.
inline constexpr char kRedissonLatchCountDown[] =
    "local v = redis.call('decr', KEYS[1]);"
    "if v <= 0 then redis.call('del', KEYS[1]) end;"
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";

// RPermitExpirableSemaphore's tryAcquire (one attempt). KEYS[1] semaphore,
// KEYS[2] "{N}:timeout", KEYS[3] channel; ARGV[1] permits, ARGV[2] the
// lease end (epoch ms, or 922337203685477), ARGV[3] the client's clock (epoch
// ms), ARGV[4] 922337203685477, ARGV[5] publish command, ARGV[6..] the ids'
// bytes. "OK" when taken, ":<earliest lease end>" or nil when not.
inline constexpr char kRedissonPermitTryAcquire[] =
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], "
    "'limit', 0, ARGV[1]); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;"
    "end; "
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
    "redis.call('decrby', KEYS[1], ARGV[1]); "
    "for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); "
    "end; "
    "local ttl = redis.call('pttl', KEYS[1]); "
    "if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; "
    "return 'OK'; "
    "end; "
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); "
    "if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); "
    "end "
    "return nil;";

// RPermitExpirableSemaphore's tryRelease. KEYS[1] semaphore, KEYS[2]
// channel, KEYS[3] "{N}:timeout"; ARGV[1] the id's bytes, ARGV[2] 1,
// ARGV[3] the client's clock (epoch ms), ARGV[4] publish command. 1 when
// released in time, 0 otherwise.
inline constexpr char kRedissonPermitTryRelease[] =
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);"
    "local removed = redis.call('zrem', KEYS[3], ARGV[1]);"
    "if tonumber(removed) ~= 1 then return 0; end;"
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); "
    "redis.call(ARGV[4], KEYS[2], value); "
    "if tonumber(expire) <= tonumber(ARGV[3]) then return 0; end;"
    "return 1;";

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_REDISSON_SCRIPTS_H_
