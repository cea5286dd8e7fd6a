-- Count a count-down latch down by one (CountDown()); at zero the key goes
-- and the zero message wakes every waiter of every client, as Redisson's
-- countDown does. Uses lua/counter_lib.lua and lua/lock_lib.lua's
-- publish_command() and publish_unlock().
-- KEYS[1]  latch name
-- KEYS[2]  channel "redisson_countdownlatch__channel__{<name>}" (or
--          "redisson_countdownlatch__channel__<name>" when the name
--          contains "{")
-- ARGV[1]  publish command: "publish", "spublish" or "none"
-- ARGV[2]  the zero message ("0")
-- Returns the count after (0 when the key did not exist: nothing changed);
-- NOTALATCH as count_at(); UNPUBLISHED after the write when the publish
-- was refused.
-- ('none': no pub/sub, nothing is published.)
local command = ARGV[1] ~= 'none' and publish_command(ARGV[1]) or nil
local count = count_at(KEYS[1], 'NOTALATCH')
if count == nil then
  return 0
end
if count > 1 then
  return redis.call('decr', KEYS[1])
end
redis.call('del', KEYS[1])
if count == 1 then
  return command and publish_unlock(KEYS[2], ARGV[2], command) or 0
end
return 0
