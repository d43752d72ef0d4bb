package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts that make every state change of a key one atomic step on the server.
// Each works on one hash (KEYS[1]) and reads the time with TIME, so leases run on the
// Redis server's clock. Times are stored as decimal microseconds since the Unix epoch,
// written with %.0f: Lua 5.1 numbers are doubles, exact to 2^53, and tostring would
// round them to 14 digits.
//
// Fields of the hash:
//
//	s, k   scope and key (diagnostics only: the key's name is their hash)
//	st     "started" or "completed"
//	fp     the request fingerprint (bytes)
//	m, p   method and path
//	rp     recovery point ("started" before any phase)
//	lu     lease end; "0" once released
//	tok    fencing token of the lock that holds or last held the key
//	ca, co created and completed
//	sc, h, b  status, headers (storage.EncodeHeader) and body of a completed key
//	rq     the kept request (storage.EncodeRequest) of a started key, for core.Completer
//	rl     when the lease was released (lu is then "0"): the completer's grace runs from it
//	at, na the completer's attempts and next attempt
//
// A completed key keeps the token of the lock that completed it, so a completion or a
// release sent again after a lost reply recognises its own work.

// prelude is shared by the scripts that write times.
const prelude = `
local function now_us()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function us(n) return string.format('%.0f', n) end
-- cover keeps the key alive at least until a lease ending at 'untl' has run out, so Redis
-- never expires a key whose lease is live.
local function cover(k, untl, now)
	local need = math.ceil((untl - now) / 1000)
	local ttl = redis.call('PTTL', k)
	if ttl >= 0 and ttl < need then redis.call('PEXPIRE', k, need) end
end
`

// claimScript claims a key, takes an expired lease over, or returns the record holding it.
//
// ARGV: 1 fingerprint, 2 method, 3 path, 4 new token, 5 lease (µs), 6 retention of the
// claim (µs; 0 or less: never past retention), 7 key TTL (ms), 8 scope, 9 key, 10 the
// kept request ("" for none).
//
// Returns {'claimed'}; {'takeover', point}; {'mine', point} when the key already holds
// this claim's token (the client sent the script again after losing the reply); or
// {'record', now, st, fp, rp, lu, ca, m, p, co, sc, h, b}.
//
// The script decides as storage.Decide does, atomically (a takeover must not race):
// absent when past retention and not live, a takeover when started, not live and of
// the same fingerprint, the record otherwise. The Go side classifies every record reply
// with storage.Decide at the script's now and refuses one Decide would not report;
// TestClaimScriptDecidesAsDecide holds the two to each other over every combination.
var claimScript = redis.NewScript(prelude + `
local k = KEYS[1]
local now = now_us()
local lease = tonumber(ARGV[5])
local r = redis.call('HMGET', k, 'st', 'tok', 'fp', 'rp', 'lu', 'ca', 'm', 'p', 'co', 'sc', 'h', 'b')
local st = r[1]
if st then
	if st == 'started' and r[2] == ARGV[4] then
		return {'mine', r[4]}
	end
	local live = st == 'started' and (tonumber(r[5]) or 0) > now
	local ret = tonumber(ARGV[6])
	local old = ret > 0 and now - (tonumber(r[6]) or 0) > ret
	if live or not old then
		if st == 'started' and not live and r[3] == ARGV[1] then
			redis.call('HSET', k, 'tok', ARGV[4], 'lu', us(now + lease))
			cover(k, now + lease, now)
			return {'takeover', r[4]}
		end
		return {'record', us(now), st, r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12]}
	end
	-- Past retention and not live: the key counts as absent.
	redis.call('DEL', k)
end
redis.call('HSET', k, 's', ARGV[8], 'k', ARGV[9], 'st', 'started', 'fp', ARGV[1], 'm', ARGV[2], 'p', ARGV[3],
	'rp', 'started', 'lu', us(now + lease), 'tok', ARGV[4], 'ca', us(now))
if ARGV[10] and ARGV[10] ~= '' then redis.call('HSET', k, 'rq', ARGV[10]) end
redis.call('PEXPIRE', k, math.max(tonumber(ARGV[7]), math.ceil(lease / 1000)))
return {'claimed'}
`)

// renewScript renews the lease, and records a recovery point when one is given, while the
// key is started, holds the token and was not released (lu "0"): a renewal that lands
// after a Release extends nothing.
//
// ARGV: 1 token, 2 lease (µs), 3 recovery point (optional). Returns 1, or 0 when the token
// is not the key's (taken over, claimed afresh, expired) or the lease was given up.
var renewScript = redis.NewScript(prelude + `
local k = KEYS[1]
local r = redis.call('HMGET', k, 'st', 'tok', 'lu')
if r[1] ~= 'started' or r[2] ~= ARGV[1] or r[3] == '0' then return 0 end
local now = now_us()
local lu = now + tonumber(ARGV[2])
redis.call('HSET', k, 'lu', us(lu))
if ARGV[3] then redis.call('HSET', k, 'rp', ARGV[3]) end
cover(k, lu, now)
return 1
`)

// completeScript records the response while the key is started and holds the token. The
// key's TTL is left as it is: retention counts from the claim.
//
// ARGV: 1 token, 2 status, 3 headers, 4 body. Returns 1 (also when this token already
// completed the key), or 0 when the token is not the key's.
var completeScript = redis.NewScript(prelude + `
local k = KEYS[1]
local r = redis.call('HMGET', k, 'st', 'tok')
if r[2] ~= ARGV[1] then return 0 end
if r[1] == 'completed' then return 1 end
redis.call('HSET', k, 'st', 'completed', 'sc', ARGV[2], 'h', ARGV[3], 'b', ARGV[4], 'co', us(now_us()), 'lu', '0')
redis.call('HDEL', k, 'rq')
return 1
`)

// releaseScript gives the key up while it holds the token: deletes it when its recovery
// point is still "started" (no phase ever recorded, whatever the client believes), or
// else ends the lease at once and keeps the point, so the next retry takes over.
//
// ARGV: 1 token. Returns 1 released (also when the key is gone: this script, sent again
// after its reply was lost, already deleted it, or it expired), 2 completed by this token
// (nothing to give up), or 0 when another token holds the key.
var releaseScript = redis.NewScript(prelude + `
local k = KEYS[1]
local r = redis.call('HMGET', k, 'st', 'tok', 'rp')
if not r[1] then return 1 end
if r[2] ~= ARGV[1] then return 0 end
if r[1] == 'completed' then return 2 end
if r[3] == 'started' then
	redis.call('DEL', k)
else
	redis.call('HSET', k, 'lu', '0', 'rl', us(now_us()))
end
return 1
`)

// lookupScript reads a key without changing it, with the server's clock: the clock its
// leases run on.
//
// Returns {now} when there is no key, or {now, st, fp, rp, lu, ca, m, p, co, sc, h, b,
// rq, at, na}.
var lookupScript = redis.NewScript(prelude + `
local now = us(now_us())
local r = redis.call('HMGET', KEYS[1], 'st', 'fp', 'rp', 'lu', 'ca', 'm', 'p', 'co', 'sc', 'h', 'b', 'rq', 'at', 'na')
if not r[1] then return {now} end
return {now, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14]}
`)
