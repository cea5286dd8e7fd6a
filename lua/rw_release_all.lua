-- Release every read or write hold of one owner of a read-write lock at
-- once (a closing client's holds; the undo of an attempt whose outcome is
-- unknown). Uses lua/lock_lib.lua and lua/rw_lib.lua, prepended when loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  channel "redisson_rwlock:{N}"
-- ARGV[1]  the message when the lock is freed or turns to read mode:
--          "0" for a reader's holds, "1" for a writer's
-- ARGV[2]  owner field: a reader's "<client-id>:<thread-id>" or a writer's
--          "<client-id>:<thread-id>:write"
-- ARGV[3]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when the owner held the lock, else 0; an UNPUBLISHED error when
-- the waiters could not be told.
local publish = publish_command(ARGV[3])  -- raises before any write
if redis.call('hget', KEYS[1], 'mode') == false then
  return 0
end
local tell
if string.find(ARGV[2], ':write$') then
  tell = write_drop(KEYS[1], ARGV[2])
  if tell == nil then
    return 0
  end
  tell = true  -- freed, or readers may now enter
else
  if not read_drop(KEYS[1], ARGV[2]) then
    return 0
  end
  tell = read_settle(KEYS[1])
end
if tell == 'shortened' then
  return publish_unlock(KEYS[2], '1', publish) or 1  -- every waiter
elseif tell then
  return publish_unlock(KEYS[2], ARGV[1], publish) or 1
end
return 1
