-- Add permits to a semaphore (Release(), AddPermits()) and publish the new
-- count on its channel, as Redisson's release does, which wakes every
-- waiter of every client. Uses lua/counter_lib.lua.
-- KEYS[1]  semaphore name
-- KEYS[2]  channel "redisson_sc:{<name>}" (or "redisson_sc:<name>")
-- ARGV[1]  permits to add (not 0; a negative number takes them away)
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  the largest count allowed (either sign)
-- ARGV[4]  a refused publish: "report" or "ignore" (see tell())
-- Returns the new count (an absent key counts 0; its TTL, if any, stays);
-- an OUTOFRANGE error, nothing changed, when the count would leave
-- [-ARGV[3], ARGV[3]]; NOTASEMAPHORE as count_at(); UNPUBLISHED after the
-- write when the publish was refused (and reported).
local permits, bad = count_to_publish(KEYS[1], 'NOTASEMAPHORE', ARGV[2])
if bad then
  return bad
end
local after = (permits or 0) + tonumber(ARGV[1])
if after > tonumber(ARGV[3]) or after < -tonumber(ARGV[3]) then
  return redis.error_reply('OUTOFRANGE the count would be ' ..
      string.format('%.0f', after) .. ', beyond ' .. ARGV[3])
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
return tell(KEYS[2], value, ARGV[2], ARGV[4]) or value
