-- What is at a read-write lock's key, for the queries of its read and write
-- handles and for a waiter whose holder has no lease. Uses
-- lua/shape_lib.lua, prepended when loaded.
-- KEYS[1]  lock name N
-- ARGV[1]  the caller's field (a reader's, or a writer's ending in ":write")
-- ARGV[2]  "read" or "write": the handle asking
-- Returns {held, pttl, count}: held 1 when the handle's lock is held
-- (Redisson's isLocked(): the read lock in read mode, or in write mode when
-- the writer also holds read holds; the write lock in write mode), the key's
-- PTTL in milliseconds (-2 free, -1 no TTL), and the caller's hold count; a
-- NOTALOCK error when the key holds anything but a read-write lock.
local shape = is_rwlock(KEYS[1])
if shape == 'free' then
  return {0, -2, 0}
end
if shape ~= 'rwlock' then
  return redis.error_reply('NOTALOCK the key holds a ' ..
      redis.call('type', KEYS[1]).ok .. ' that is not a read-write lock')
end
local mode = redis.call('hget', KEYS[1], 'mode')
local held = 0
if ARGV[2] == 'write' then
  if mode == 'write' then
    held = 1
  end
elseif mode == 'read' or redis.call('hlen', KEYS[1]) > 2 then
  held = 1
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
return {held, redis.call('pttl', KEYS[1]), count}
