-- Helpers of the read-write lock's scripts, prepended after lock_lib.lua.
--
-- Redisson's RReadWriteLock data model. The lock is one hash N:
--   'mode'                        'read' or 'write'
--   '<client-id>:<thread-id>'     a reader's read hold count
--   '<client-id>:<thread-id>:write'  the writer's write hold count
-- Read hold i of a reader also has its own lease, the key
-- '{N}:<reader field>:rwlock_timeout:<i>' ('N:...' when N contains '{', so
-- that it shares N's cluster slot), and in read mode the hash lives as long
-- as the longest of them. Readers share the lock in read mode; in write mode
-- only the writer holds it, and may take read holds too (a downgrade).

-- rw_prefix(name): Redisson's suffixName() prefix of N's companion keys.
local function rw_prefix(name)
  if string.find(name, '{', 1, true) then
    return name
  end
  return '{' .. name .. '}'
end

-- read_timeout_key(name, reader, i): the lease key of `reader`'s read hold i.
local function read_timeout_key(name, reader, i)
  return rw_prefix(name) .. ':' .. reader .. ':rwlock_timeout:' .. i
end

-- read_settle(key): after a read hold ended. In read mode the hash lives as
-- long as its longest read lease; with none left (every reader released, or
-- the leases of dead readers ran out) it is deleted. In write mode the
-- writer's lease governs. Returns true when the key was deleted (the lock is
-- free: the caller tells the waiters), 'shortened' when the hash now ends
-- earlier (the hold that ended had the longest lease: a waiter sleeping
-- until the old end should re-check, and sleep until the new one; the
-- caller tells them with the read-unlock message "1"), else false.
local function read_settle(key)
  if redis.call('hget', key, 'mode') == 'write' then
    return false
  end
  local longest = -2
  local fields = redis.call('hgetall', key)
  for i = 1, #fields, 2 do
    local field = fields[i]
    if field ~= 'mode' and not string.find(field, ':write$') then
      for j = tonumber(fields[i + 1]) or 0, 1, -1 do
        longest = math.max(longest,
            redis.call('pttl', read_timeout_key(key, field, j)))
      end
    end
  end
  if longest > 0 then
    local before = redis.call('pttl', key)
    redis.call('pexpire', key, longest)
    return longest < before and 'shortened'
  end
  redis.call('del', key)
  return true
end

-- read_drop(key, reader): removes every read hold of `reader`. Returns
-- whether it had any.
local function read_drop(key, reader)
  local count = tonumber(redis.call('hget', key, reader))
  if count == nil then
    return false
  end
  redis.call('hdel', key, reader)
  for j = count, 1, -1 do
    redis.call('del', read_timeout_key(key, reader, j))
  end
  return true
end

-- write_drop(key, writer): removes the write holds of `writer`. With read
-- holds of its own left (a downgrade), the lock turns to read mode. Returns
-- nil when it held none, else true when the key was deleted (else what
-- read_settle() returns: false or 'shortened').
local function write_drop(key, writer)
  if redis.call('hdel', key, writer) == 0 then
    return nil
  end
  if redis.call('hlen', key) <= 1 then
    redis.call('del', key)
    return true
  end
  redis.call('hset', key, 'mode', 'read')
  return read_settle(key)
end
