-- Add permits to a semaphore (Release(), AddPermits()) and publish the new
-- count on its channel, as Redisson's release does, which wakes every
-- waiter of every client. Uses lua/counter_lib.lua and lua/lock_lib.lua's
-- publish_command() and publish_unlock().
-- KEYS[1]  semaphore name
-- KEYS[2]  channel "redisson_sc:{<name>}" (or "redisson_sc:<name>")
-- ARGV[1]  permits to add (not 0; a negative number takes them away)
-- ARGV[2]  publish command: "publish", "spublish" or "none"
-- ARGV[3]  the largest count allowed (either sign)
-- Returns the new count (an absent key counts 0; its TTL, if any, stays);
-- an OUTOFRANGE error, nothing changed, when the count would leave
-- [-ARGV[3], ARGV[3]]; NOTASEMAPHORE as count_at(); UNPUBLISHED after the
-- write when the publish was refused.
-- ('none': no pub/sub, nothing is published.)
local command = ARGV[2] ~= 'none' and publish_command(ARGV[2]) or nil
local permits = count_at(KEYS[1], 'NOTASEMAPHORE') or 0
local after = permits + tonumber(ARGV[1])
if after > tonumber(ARGV[3]) or after < -tonumber(ARGV[3]) then
  return redis.error_reply('OUTOFRANGE the count would be ' ..
      string.format('%.0f', after) .. ', beyond ' .. ARGV[3])
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
return command and publish_unlock(KEYS[2], value, command) or value
