-- Helpers prepended to the scripts that use them (lib/lock/lock_scripts.cc
-- does the prepending, once, when the scripts are built).
--
-- is_lock(key): 'free' when the key does not exist, 'lock' when it holds a
-- lock-shaped hash (every field an owner "<client-id>:<thread-id>" whose
-- value is a positive hold count: relock's and Redisson's lock model), else
-- 'other' (a string, list, set, or a hash that is not a lock).
local function is_lock(key)
  local kind = redis.call('type', key).ok
  if kind == 'none' then
    return 'free'
  end
  if kind ~= 'hash' then
    return 'other'
  end
  local fields = redis.call('hgetall', key)
  for i = 1, #fields, 2 do
    if not string.find(fields[i], ':%d+$')
        or not string.find(fields[i + 1], '^[1-9]%d*$') then
      return 'other'
    end
  end
  return 'lock'
end

-- publish_command(arg): the command to publish unlock messages with, from a
-- script's argument: 'publish' (classic pub/sub; also when the argument is
-- absent, as in Redisson's own scripts) or 'spublish' (sharded pub/sub, Redis
-- >= 7, which the cluster backend uses; the channel is in the lock's slot),
-- in any case (Redisson passes them upper-case).
-- Anything else raises an error, so a script calls it before it writes.
local function publish_command(arg)
  local command = string.lower(arg or 'publish')
  if command == 'publish' or command == 'spublish' then
    return command
  end
  error({err = 'ERR publish command must be publish or spublish, not ' ..
      tostring(arg)})
end

-- publish_unlock(channel, message, command): publishes the unlock message
-- with `command` (from publish_command()). Returns nil, or an UNPUBLISHED
-- error reply (for the script to return after it freed the lock) when Redis
-- refused the publish, e.g. an ACL user without the right to publish on the
-- channel: the caller learns that the lock is free but its waiters were not
-- told.
local function publish_unlock(channel, message, command)
  local published = redis.pcall(command, channel, message)
  if type(published) == 'table' and published.err then
    return redis.error_reply('UNPUBLISHED ' .. published.err)
  end
  return nil
end

-- release_one(key, owner, lease_ms): counts one hold of `owner` down.
-- Returns nil when `owner` does not hold the lock, 0 when holds remain (the
-- lease set to `lease_ms`, unless it is "0": the TTL is kept), 1 when that
-- was the last hold (the key is deleted; the caller tells the waiters).
local function release_one(key, owner, lease_ms)
  if redis.call('hexists', key, owner) == 0 then
    return nil
  end
  local remaining = redis.call('hincrby', key, owner, -1)
  if remaining > 0 then
    if tonumber(lease_ms) > 0 then
      redis.call('pexpire', key, lease_ms)
    end
    return 0
  end
  redis.call('del', key)
  return 1
end
