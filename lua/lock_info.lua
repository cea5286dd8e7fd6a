-- A lock's whole shape in one atomic read, for inspection (relock status,
-- Client::InspectLock). Uses is_lock() and is_rwlock() from
-- lua/shape_lib.lua, prepended when the script is loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  the fair lock's queue "redisson_lock_queue:{N}" (N's slot)
-- Returns {shape, pttl, queue, fields}: shape 'free', 'lock' (a plain,
-- fenced or fair lock: owner fields with hold counts), 'rwlock' (a
-- read-write lock: 'mode' and owner fields) or, for anything else, the
-- key's type ('string', 'hash', ...); pttl the key's PTTL in milliseconds
-- (-2 free, -1 no TTL); queue the length of the fair queue (0 when there is
-- none); fields the hash's field/value pairs (HGETALL) for a lock, else empty.
local queue = 0
if redis.call('type', KEYS[2]).ok == 'list' then
  queue = redis.call('llen', KEYS[2])
end
local shape = is_lock(KEYS[1])
if shape == 'other' then
  if is_rwlock(KEYS[1]) == 'rwlock' then
    shape = 'rwlock'
  else
    return {redis.call('type', KEYS[1]).ok, redis.call('pttl', KEYS[1]),
            queue, {}}
  end
end
if shape == 'free' then
  return {'free', -2, queue, {}}
end
return {shape, redis.call('pttl', KEYS[1]), queue,
        redis.call('hgetall', KEYS[1])}
