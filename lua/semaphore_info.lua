-- What a semaphore's keys hold, for inspection (Client::InspectSemaphore(),
-- `relock status`): read-only, nothing is reclaimed or published.
-- Uses lua/counter_lib.lua and lua/permit_lib.lua.
-- KEYS[1]  semaphore name N
-- KEYS[2]  "{N}:timeout"
-- ARGV[1]  how many permits to list at the most
-- Returns {count_exists, count (its text: exact beyond 2^53), permits_out,
-- now_ms, {id, score, ...}}:
-- the permits out soonest lease end first, ids as stored (16 bytes);
-- NOTASEMAPHORE as count_at() and timeouts_bad().
local count, bad, text = count_at(KEYS[1], 'NOTASEMAPHORE')
if bad then
  return bad
end
bad = timeouts_bad(KEYS[2])
if bad then
  return bad
end
local listed = redis.call('zrange', KEYS[2], 0, tonumber(ARGV[1]) - 1,
    'withscores')
return {count == nil and 0 or 1, text or 0, redis.call('zcard', KEYS[2]),
    now_ms(), listed}
