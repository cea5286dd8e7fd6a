-- Writes a client's info record (lib/client/client_info.h): the hash
-- "relock:client:<client-id>" with its fields, and its TTL, in one round trip
-- (the record ends by itself when its client stops renewing it).
-- KEYS[1]  the record's key
-- ARGV[1]  its TTL in milliseconds
-- ARGV[2..] field, value, field, value, ...
-- Returns 1.
redis.call('hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
