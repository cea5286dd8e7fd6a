-- Count a count-down latch down by one (CountDown()); at zero the key goes
-- and the zero message wakes every waiter of every client, as Redisson's
-- countDown does. Uses lua/counter_lib.lua.
-- KEYS[1]  latch name
-- KEYS[2]  channel "redisson_countdownlatch__channel__{<name>}" (Redisson's
--          name, braces around the whole name even when it contains "{")
-- ARGV[1]  publish command: "publish" or "spublish"
-- ARGV[2]  the zero message ("0")
-- ARGV[3]  a refused publish: "report" or "ignore" (see tell())
-- Returns the count after (0 when the key did not exist: nothing changed);
-- NOTALATCH as count_at(); UNPUBLISHED after the write when the publish
-- was refused (and reported).
local count, bad = count_to_publish(KEYS[1], 'NOTALATCH', ARGV[1])
if bad then
  return bad
end
if count == nil then
  return 0
end
if count > 1 then
  return redis.call('decr', KEYS[1])
end
redis.call('del', KEYS[1])
if count == 1 then
  return tell(KEYS[2], ARGV[2], ARGV[1], ARGV[3]) or 0
end
return 0
