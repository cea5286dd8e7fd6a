-- Helpers of the permit-expirable semaphore (Redisson's
-- RPermitExpirableSemaphore), prepended after lua/counter_lib.lua by
-- lib/lock/lock_scripts.cc. The semaphore N is the string N holding the
-- available permits and the sorted set "{N}:timeout" (Redisson's
-- suffixName) of the permits handed out: member the permit id's 16 bytes
-- (callers pass its hex form), score the epoch millisecond at which it
-- expires, NO_LEASE for a permit without one (Redisson's nonExpirable
-- timeout). Times are the server's (TIME), not a client's clock.
local NO_LEASE = 922337203685477

-- Effects replication (the default from Redis 5 on, the only kind from 7):
-- needed before TIME may precede writes on older servers.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- now_ms(): the server's clock in epoch milliseconds.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- permit_id(hex): the id's bytes, as Redisson stores them.
local function permit_id(hex)
  return (string.gsub(hex, '%x%x', function(cc)
    return string.char(tonumber(cc, 16))
  end))
end

-- timeouts_bad(key): nil when `key` is a sorted set or absent; else the
-- NOTASEMAPHORE error reply, for the script to return before it writes.
local function timeouts_bad(key)
  local kind = redis.call('type', key).ok
  if kind == 'zset' or kind == 'none' then
    return nil
  end
  return redis.error_reply('NOTASEMAPHORE the permits\' key ' .. key ..
      ' holds a ' .. kind .. ', not a sorted set')
end

-- reclaim(key, timeouts, channel, now, publish): gives the permits whose
-- lease ended by `now` back to the count and, when it is then positive,
-- publishes it (a refused publish is no matter: the waiters' re-check at
-- the lease end finds them), as Redisson's acquire does first.
local function reclaim(key, timeouts, channel, now, publish)
  local expired = redis.call('zrangebyscore', timeouts, 0, now)
  if #expired == 0 then
    return
  end
  for i = 1, #expired, 1000 do
    redis.call('zrem', timeouts,
        unpack(expired, i, math.min(i + 999, #expired)))
  end
  local value = redis.call('incrby', key, #expired)
  if value > 0 then
    redis.pcall(publish, channel, value)
  end
end

-- permit_checks(key, timeouts, publish): nil, or the error reply of a bad
-- publish command, of a count key that holds no count, or of a timeouts
-- key that is no sorted set.
local function permit_checks(key, timeouts, publish)
  local _, bad = count_to_publish(key, 'NOTASEMAPHORE', publish)
  return bad or timeouts_bad(timeouts)
end

-- score_of(now, lease): the score of a permit leased for `lease` ms.
local function score_of(now, lease)
  return string.format('%.0f', now + tonumber(lease))
end
