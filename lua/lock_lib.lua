-- Helpers prepended to the scripts that use them (lib/lock/lock_scripts.cc
-- does the prepending, once, when the scripts are built).

-- keep_ttl(key): a write that Redis never refuses for memory (see
-- release_one()) and that changes nothing, the TTL of `key` included: HDEL
-- of the field '', which no lock has (owner fields are "<uuid>:<number>").
local function keep_ttl(key)
  redis.call('hdel', key, '')
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

-- wake_fair_waiter(queue, channel, message, command): a plain lock's release
-- that freed the lock also wakes the next waiter of the name's fair lock
-- queue, if there is one (`queue`: nil or its key), on its own channel
-- "<channel>:<owner>" (see lua/fair_lib.lua): a FairLock that found the
-- name held by a plain lock (which it cannot tell from a fair one) queued
-- for it and would otherwise sleep until its re-check. The next waiter is
-- the head, or, when the head's deadline passed (a waiter that died there,
-- not dropped yet), the waiter with the earliest deadline still to come.
-- Returns nil or an UNPUBLISHED error reply (see publish_unlock()): it runs
-- after the lock was freed, so nothing here may fail the script (a queue
-- key of another type, or one the ACL user may not read, is reported, not
-- raised).
local function wake_fair_waiter(queue, channel, message, command)
  if not queue then
    return nil
  end
  local head = redis.pcall('lindex', queue, 0)
  if type(head) == 'table' and head.err then
    return redis.error_reply('UNPUBLISHED ' .. head.err ..
        ' (reading the fair lock queue ' .. queue .. ')')
  end
  if not head then
    return nil
  end
  local deadlines = 'redisson_lock_timeout:' ..
      string.sub(queue, #'redisson_lock_queue:' + 1)
  local t = redis.pcall('time')  -- (an ACL may refuse it: the head, then)
  if type(t) ~= 'table' or t.err then
    return publish_unlock(channel .. ':' .. head, message, command)
  end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local deadline = redis.pcall('zscore', deadlines, head)
  if type(deadline) ~= 'string' or tonumber(deadline) <= now then
    local live = redis.pcall('zrangebyscore', deadlines, '(' .. now, '+inf',
        'LIMIT', 0, 1)
    if type(live) == 'table' and not live.err then
      if not live[1] then
        return nil  -- nobody in time
      end
      head = live[1]
    end
  end
  return publish_unlock(channel .. ':' .. head, message, command)
end

-- release_one(key, owner, lease_ms): counts one hold of `owner` down.
-- Returns nil when `owner` does not hold the lock, 0 when holds remain (the
-- lease set to `lease_ms`, unless it is "0": the TTL is kept), 1 when that
-- was the last hold (the key is deleted; the caller tells the waiters).
--
-- Never refused for memory: at maxmemory (noeviction) Redis refuses a
-- script's first write when it is a command that may grow memory (HINCRBY,
-- HSET, SET; not DEL, HDEL, PEXPIRE, PERSIST, PUBLISH), and lets every write
-- after it through (a script cannot stop halfway). So a last hold is freed
-- with DEL alone, and a count that goes down starts with its lease.
local function release_one(key, owner, lease_ms)
  local count = tonumber(redis.call('hget', key, owner))
  if count == nil then
    return nil
  end
  if count <= 1 then
    redis.call('del', key)
    return 1
  end
  if tonumber(lease_ms) > 0 then
    redis.call('pexpire', key, lease_ms)
  else
    keep_ttl(key)
  end
  redis.call('hincrby', key, owner, -1)
  return 0
end
