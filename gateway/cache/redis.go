package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/quarry-router/quarry/platform/redisx"
	"github.com/redis/go-redis/v9"
)

// RedisConfig says how to reach the Redis server that holds the cache every gateway
// replica shares, how long to wait for it, and how the cache uses it.
type RedisConfig struct {
	redisx.Config
	// BreakerFailures consecutive failed calls trigger a health check of Redis; if that
	// fails too, the circuit breaker opens and lets one call through every
	// BreakerCooldown to see whether Redis is back.
	BreakerFailures int
	BreakerCooldown time.Duration
	// PostingScan bounds how many members of one token's posting a fuzzy lookup reads
	// (the most recently stored first), which bounds its cost whatever the vocabulary.
	PostingScan int
	// NearBytes bounds the copies of Redis entries a gateway keeps in its own memory
	// (Near); 0 keeps none, and every lookup goes to Redis.
	NearBytes int
}

// RegisterFlags registers the Redis flags with their defaults.
func (c *RedisConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, redisx.Flags{
		Defaults: redisx.Config{
			Addr:        "127.0.0.1:6379",
			PoolSize:    64,
			DialTimeout: time.Second,
			Timeout:     10 * time.Millisecond,
			KeyPrefix:   "quarry:",
		},
		Use:         "with -cache-backend redis",
		PastTimeout: "past it the query is answered uncached",
		PasswordEnv: "QUARRY_GATEWAY_REDIS_PASSWORD",
	})
	fs.IntVar(&c.BreakerFailures, "redis-breaker-failures", 5, "consecutive failed Redis calls that trigger a health check; if it fails too, cache calls stop until a probe succeeds")
	fs.DurationVar(&c.BreakerCooldown, "redis-breaker-cooldown", time.Second, "how often one probe call tests whether Redis is back")
	fs.IntVar(&c.PostingScan, "redis-posting-scan", 500, "most members of one token's posting a fuzzy lookup reads (newest first)")
	fs.IntVar(&c.NearBytes, "redis-near-bytes", 32<<20, "bytes of Redis cache entries each gateway keeps in memory, answering a repeated question without a Redis round trip (0 = none)")
}

// Validate rejects settings the Redis client or the cache cannot use, naming the flag.
func (c *RedisConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.BreakerFailures < 1:
		return fmt.Errorf("-redis-breaker-failures must be at least 1, got %d", c.BreakerFailures)
	case c.BreakerCooldown <= 0:
		return fmt.Errorf("-redis-breaker-cooldown must be positive, got %s", c.BreakerCooldown)
	case c.PostingScan < 1:
		return fmt.Errorf("-redis-posting-scan must be at least 1, got %d", c.PostingScan)
	case c.NearBytes < 0:
		return fmt.Errorf("-redis-near-bytes must not be negative, got %d", c.NearBytes)
	}
	return nil
}

// DefaultRedisConfig returns the flag defaults.
func DefaultRedisConfig() RedisConfig {
	var c RedisConfig
	c.RegisterFlags(flag.NewFlagSet("redis", flag.ContinueOnError))
	return c
}

// maxRawKeyPart is the longest query or token used verbatim in a key; longer ones are
// hashed, which keeps keys and posting members short. The entry itself holds the full
// query, so a hash collision is a miss, never a wrong answer.
const maxRawKeyPart = 64

// maxFuzzyFetch bounds how many of the best fuzzy candidates one lookup tries when the
// best ones have been evicted since they were indexed.
const maxFuzzyFetch = 8

// Redis is the Store shared by every gateway replica.
//
// T0: one string per answer, key <prefix>e:<kb>:<generation>:<query>, holding the
// encoded Entry, with a TTL. T1: per knowledge base, generation and token, a sorted set
// <prefix>t:<kb>:<generation>:<token> scored by expiry — an inverted index that lives
// and dies with the entries. Its members carry the entry's token count and a 3-byte
// hash of each of its tokens before the query, so a candidate is scored from its member
// alone. A fuzzy lookup is one Lua script that reads only the postings of the
// query's rarest tokens (prefix filtering, bounded by PostingScan), scores each
// candidate, and returns only the best one's entry. A sorted set <prefix>lru bounds the
// entry count, least recently used first; each posted entry's index record
// (<prefix>i:…) lets its eviction take it out of its postings too.
//
// Generations are part of every key: a bump makes every older entry unreachable
// without deleting anything; those entries simply expire.
type Redis struct {
	c       redis.UniversalClient
	cfg     Config
	timeout time.Duration
	scan    int
	prefix  string
	lruKey  string
	seqKey  string
	now     func() time.Time
	br      *breaker
	metrics *redisMetrics
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Store on client, which the caller owns and closes. now is the
// clock of TTLs (time.Now in production); the replicas' clocks are assumed to agree to
// well within the TTL, and Redis's own key expiry is the backstop.
func NewRedis(client redis.UniversalClient, cfg Config, rcfg RedisConfig, now func() time.Time, log *slog.Logger) *Redis {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix := rcfg.Prefix()
	return &Redis{
		c:       client,
		cfg:     cfg,
		timeout: rcfg.Timeout,
		scan:    rcfg.PostingScan,
		prefix:  prefix,
		lruKey:  prefix + "lru",
		seqKey:  prefix + "seq",
		now:     now,
		br: newBreaker(rcfg.BreakerFailures, rcfg.BreakerCooldown,
			func(ctx context.Context) error { return client.Ping(ctx).Err() }, log),
		metrics: newRedisMetrics(),
	}
}

// RedisStats counts what the store did since it was made.
type RedisStats struct {
	// Hits and Misses count lookups (exact and fuzzy) that Redis answered.
	Hits, Misses int64
	// BadEntries counts values that could not be decoded or did not belong to the key
	// they were under; each was a miss as well.
	BadEntries int64
	// Stored counts answers put.
	Stored int64
	// Failures counts calls Redis did not answer in time or at all, or answered with an
	// error; Skipped counts calls the circuit breaker kept from Redis. Both were answered
	// uncached.
	Failures, Skipped int64
}

// Stats returns the store's counters.
func (r *Redis) Stats() RedisStats {
	m := r.metrics
	return RedisStats{
		Hits:       m.sum(outcomeHit, opGet, opSimilar),
		Misses:     m.sum(outcomeMiss, opGet, opSimilar) + m.sum(outcomeBadEntry, opGet, opSimilar),
		BadEntries: m.sum(outcomeBadEntry, opGet, opSimilar),
		Stored:     m.sum(outcomeStored, opPut),
		Failures:   m.sum(outcomeError, opGet, opSimilar, opPut),
		Skipped:    m.sum(outcomeSkipped, opGet, opSimilar, opPut),
	}
}

// EntryKey returns the key under which the answer to query (normalised) is stored for
// kb at gen; tests and benchmarks use it to reach an entry directly.
func (r *Redis) EntryKey(kb string, gen uint64, query string) string {
	return r.entryPrefix(kb, gen) + keyPart(query)
}

func (r *Redis) entryPrefix(kb string, gen uint64) string {
	return r.prefix + "e:" + kb + ":" + strconv.FormatUint(gen, 10) + ":"
}

func (r *Redis) postingKey(kb string, gen uint64, token string) string {
	return r.prefix + "t:" + kb + ":" + strconv.FormatUint(gen, 10) + ":" + keyPart(token)
}

// member is an entry's name in the postings: its token count (2 bytes, big-endian) and
// token signature (3 bytes of hash per token), all a fuzzy lookup needs to score it
// without reading the entry, then its key part.
func member(tokens []string, part string) string {
	b := make([]byte, 0, 2+3*len(tokens)+len(part))
	b = append(b, byte(len(tokens)>>8), byte(len(tokens)))
	for _, t := range tokens {
		b = append(b, tokenHash(t)...)
	}
	return string(append(b, part...))
}

// tokenHash is 24 bits of a token's FNV-1a hash. A collision, or a match across two
// tokens' bytes, can only make the lookup prefer a candidate that the exact check in Go
// then rejects.
func tokenHash(t string) string {
	h := uint32(2166136261)
	for i := 0; i < len(t); i++ {
		h ^= uint32(t[i])
		h *= 16777619
	}
	return string([]byte{byte(h >> 16), byte(h >> 8), byte(h)})
}

func keyPart(s string) string {
	if len(s) <= maxRawKeyPart {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:16])
}

// call runs op with the per-call deadline, behind the circuit breaker. Failures come
// back wrapped in ErrUnavailable; redis.Nil comes back as is.
func (r *Redis) call(ctx context.Context, kind int, op func(ctx context.Context) error) error {
	probe, err := r.br.allow()
	if err != nil {
		r.metrics.add(ctx, kind, outcomeSkipped)
		return fmt.Errorf("%w: redis: %w", ErrUnavailable, err)
	}
	timeout := r.timeout
	if probe {
		timeout = checkTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	err = op(cctx)
	cancel()
	var reply redis.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		r.br.succeeded(probe)
		return err
	case ctx.Err() != nil:
		// The caller gave up: nothing learned about Redis.
		r.br.abandoned(probe)
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case errors.As(err, &reply):
		// Redis answered, with an error (out of memory, a script error): the server is up,
		// so the breaker stays closed, but the cache cannot serve this call.
		r.br.succeeded(probe)
		r.br.failedSporadically(err)
		r.metrics.add(ctx, kind, outcomeError)
		return fmt.Errorf("%w: redis: %w", ErrUnavailable, err)
	default:
		r.metrics.add(ctx, kind, outcomeError)
		r.br.failed(probe, err)
		return fmt.Errorf("%w: redis: %w", ErrUnavailable, err)
	}
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, kb string, gen uint64, query string) (*Entry, error) {
	key := r.EntryKey(kb, gen, query)
	var raw string
	err := r.call(ctx, opGet, func(ctx context.Context) error {
		var err error
		raw, err = getScript.Run(ctx, r.c, []string{key, r.lruKey, r.seqKey}).Text()
		return err
	})
	if errors.Is(err, redis.Nil) {
		r.metrics.add(ctx, opGet, outcomeMiss)
		return nil, ErrMiss
	}
	if err != nil {
		return nil, err
	}
	e, outcome := r.validFor(raw, kb, gen, query)
	r.metrics.add(ctx, opGet, outcome)
	if outcome != outcomeHit {
		return nil, ErrMiss
	}
	return e, nil
}

// valid decodes a stored value and checks that it is a live entry of kb at gen; any
// other bytes, however they got there, are a miss.
func (r *Redis) valid(raw string, kb string, gen uint64) (*Entry, int) {
	e, expires, err := decodeEntry([]byte(raw))
	switch {
	case err != nil || e.KB != kb || e.Generation != gen:
		return nil, outcomeBadEntry
	case !r.now().Before(expires):
		return nil, outcomeMiss
	}
	return e, outcomeHit
}

// validFor is valid for the entry of query: one stored under a hashed long query that
// collided with another is a bad entry.
func (r *Redis) validFor(raw, kb string, gen uint64, query string) (*Entry, int) {
	e, outcome := r.valid(raw, kb, gen)
	if outcome == outcomeHit && e.Query != query {
		outcome = outcomeBadEntry
	}
	return e, outcome
}

// Similar implements Store.
func (r *Redis) Similar(ctx context.Context, kb string, gen uint64, tokens []string) (*Entry, float64, error) {
	if len(tokens) < r.cfg.FuzzyMinTokens {
		return nil, 0, ErrMiss
	}
	tokens, nq := uniq(tokens)
	if nq < r.cfg.FuzzyMinTokens || nq > MaxFuzzyTokens {
		return nil, 0, ErrMiss
	}
	keys := make([]string, 0, 2+nq)
	keys = append(keys, r.lruKey, r.seqKey)
	args := make([]any, 0, 6+nq)
	args = append(args,
		r.now().UnixMilli(),
		strconv.FormatFloat(r.cfg.FuzzyMin, 'g', -1, 64),
		r.cfg.FuzzyMinTokens,
		r.entryPrefix(kb, gen),
		maxFuzzyFetch,
		r.scan,
	)
	for _, t := range tokens {
		keys = append(keys, r.postingKey(kb, gen, t))
		args = append(args, tokenHash(t))
	}
	var res []any
	err := r.call(ctx, opSimilar, func(ctx context.Context) error {
		var err error
		res, err = similarScript.Run(ctx, r.c, keys, args...).Slice()
		return err
	})
	if errors.Is(err, redis.Nil) {
		r.metrics.add(ctx, opSimilar, outcomeMiss)
		return nil, 0, ErrMiss
	}
	if err != nil {
		return nil, 0, err
	}
	var raw string
	if len(res) > 0 {
		raw, _ = res[0].(string)
	}
	e, outcome := r.valid(raw, kb, gen)
	if outcome != outcomeHit {
		r.metrics.add(ctx, opSimilar, outcome)
		return nil, 0, ErrMiss
	}
	// The script chose by the counts in the postings; the entry's own tokens decide.
	shared := 0
	for _, t := range e.Tokens {
		for _, q := range tokens {
			if t == q {
				shared++
				break
			}
		}
	}
	sim := float64(shared) / float64(nq+len(e.Tokens)-shared)
	if len(e.Tokens) < r.cfg.FuzzyMinTokens || !r.cfg.Reaches(sim) {
		r.metrics.add(ctx, opSimilar, outcomeMiss)
		return nil, 0, ErrMiss
	}
	r.metrics.add(ctx, opSimilar, outcomeHit)
	return e, sim, nil
}

// indexRecord is what putScript needs to take an evicted entry out of the fuzzy index:
// its posting member, the common start of its postings' keys, then each token's key
// part, every field as "<length>:<bytes>" (members are binary).
func indexRecord(member, postingPrefix string, tokens []string) string {
	var b []byte
	field := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(append(b, ':'), s...)
	}
	field(member)
	field(postingPrefix)
	for _, t := range tokens {
		field(keyPart(t))
	}
	return string(b)
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, e *Entry) error {
	if e.Size() > r.cfg.MaxEntryBytes {
		r.metrics.add(ctx, opPut, outcomeTooLarge)
		return ErrTooLarge
	}
	now := r.now()
	tokens, _ := uniq(e.Tokens)
	c := &Entry{KB: e.KB, Generation: e.Generation, Query: e.Query, Tokens: tokens, Value: e.Value, StoredAt: now}
	expires := now.Add(r.cfg.TTL)
	part := keyPart(e.Query)
	rest := e.KB + ":" + strconv.FormatUint(e.Generation, 10) + ":" + part
	keys := make([]string, 0, 4+len(tokens))
	keys = append(keys, r.prefix+"e:"+rest, r.lruKey, r.seqKey, r.prefix+"i:"+rest)
	m := member(tokens, part)
	record := ""
	// An entry with too few or too many tokens never takes part in fuzzy matching: no
	// postings, and no index record.
	if len(tokens) >= r.cfg.FuzzyMinTokens && len(tokens) <= MaxFuzzyTokens {
		for _, t := range tokens {
			keys = append(keys, r.postingKey(e.KB, e.Generation, t))
		}
		record = indexRecord(m, r.postingKey(e.KB, e.Generation, ""), tokens)
	}
	args := []any{
		encodeEntry(c, expires),
		max(r.cfg.TTL.Milliseconds(), 1),
		m,
		expires.UnixMilli(),
		r.cfg.MaxEntries,
		now.UnixMilli(),
		record,
		r.prefix + "e:",
		r.prefix + "i:",
		r.prefix + "t:",
	}
	err := r.call(ctx, opPut, func(ctx context.Context) error {
		return putScript.Run(ctx, r.c, keys, args...).Err()
	})
	if err == nil {
		r.metrics.add(ctx, opPut, outcomeStored)
	}
	return err
}

// getScript reads an entry and marks it recently used, in one round trip. A key holding
// another type (foreign data) reads as a miss. Marking is a write, which a Redis at
// maxmemory that evicts nothing more refuses (OOM): the entry is served all the same,
// unmarked, rather than the lookup failing with it (pcall).
//
// KEYS: entry, lru, seq.
var getScript = redis.NewScript(`
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then return false end
local n = redis.pcall('INCR', KEYS[3])
if type(n) == 'number' then redis.pcall('ZADD', KEYS[2], 'XX', n, KEYS[1]) end
return v
`)

// putScript stores an entry, indexes it under its tokens, and keeps the entry count
// within the bound by evicting the least recently used. Each posted entry has an index
// record (<prefix>i:<kb>:<generation>:<query>, indexRecord, with the entry's TTL) naming
// its member and postings, so an evicted entry leaves the fuzzy index with it:
// -cache-max-entries bounds the postings too, whatever the TTL. Left to expire, the
// members of evicted entries made the postings grow with the answers stored per TTL.
// An entry Redis lost otherwise (maxmemory, a DEL by hand, one stored by a release
// without index records) leaves its members to expire, or to the fuzzy lookup that
// finds them dangling.
//
// KEYS: entry, lru, seq, index record, postings...
// ARGV: value, ttl (ms), posting member, expiry (unix ms), max entries, now (unix ms),
// index record ("" when not posted), then the prefixes of entry, index record and
// posting keys.
var putScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if #KEYS > 4 then
  redis.call('SET', KEYS[4], ARGV[7], 'PX', ARGV[2])
else
  redis.call('DEL', KEYS[4])
end
for i = 5, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[4], ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[6])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), KEYS[1])
for i = 1, 4 do
  local old = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #old == 0 or old[1] == KEYS[1] or redis.call('EXISTS', old[1]) == 1 then break end
  redis.call('ZREM', KEYS[2], old[1])
end
-- unpost takes an evicted entry's member out of its postings, as its index record says;
-- a record that is missing or not one of ours changes nothing (pcall: nor does a key
-- of another type).
local ep, ip, tp = ARGV[8], ARGV[9], ARGV[10]
local sub, find = string.sub, string.find
local function unpost(entry)
  if sub(entry, 1, #ep) ~= ep then return end
  local rk = ip .. sub(entry, #ep + 1)
  local rec = redis.pcall('GET', rk)
  if type(rec) ~= 'string' then return end
  local f, i = {}, 1
  while i <= #rec do
    local c = find(rec, ':', i, true)
    local n = c and tonumber(sub(rec, i, c - 1))
    if not n or c + n > #rec then return end
    f[#f + 1] = sub(rec, c + 1, c + n)
    i = c + n + 1
  end
  if #f < 3 or sub(f[2], 1, #tp) ~= tp then return end
  for j = 3, #f do redis.pcall('ZREM', f[2] .. f[j], f[1]) end
  redis.call('DEL', rk)
end
local limit = tonumber(ARGV[5])
while redis.call('ZCARD', KEYS[2]) > limit do
  local old = redis.call('ZPOPMIN', KEYS[2])
  if old[1] ~= KEYS[1] then
    unpost(old[1])
    redis.call('DEL', old[1])
  end
end
return 1
`)

// similarScript finds the live entry whose tokens are most similar to the query's and
// returns {entry, member}, or nil. Prefix filtering: a candidate reaching the threshold
// shares at least need of the nq query tokens, so it is in the postings of any
// nq-need+1 of them. Candidates are read from the rarest tokens' postings only (at
// most `scan` of each, the newest), and each is scored from the token signature in its
// member: the long postings of common tokens are never read.
//
// KEYS: lru, seq, postings of the query's distinct tokens...
// ARGV: now (unix ms), fuzzy min, min tokens, entry key prefix, max fetches, scan,
// then ".<token hash>." of each token, in KEYS order.
var similarScript = redis.NewScript(`
local fmin = tonumber(ARGV[2]) - 1e-9
local mintok = tonumber(ARGV[3])
local scan = tonumber(ARGV[6])
local nq = #KEYS - 2
-- order: the query's postings, rarest first, each with its token's hash.
local order = {}
for i = 3, #KEYS do
  order[#order + 1] = {KEYS[i], redis.call('ZCARD', KEYS[i]), ARGV[i + 4]}
end
table.sort(order, function(a, b) return a[2] < b[2] end)
local need = math.ceil(tonumber(ARGV[2]) * nq - 1e-9)
if need < 1 then need = 1 end
local prefix = nq - need + 1
if prefix < 1 then prefix = 1 end
-- Jaccard <= min(nq, nb) / max(nq, nb): the token counts a candidate may have, and
-- for each the tokens it must share: c / (nq + nb - c) >= fmin.
local nbmin, nbmax = math.ceil(fmin * nq), math.floor(nq / fmin)
if nbmin < mintok then nbmin = mintok end
local needs = {}
for nb = nbmin, nbmax do needs[nb] = math.ceil(fmin * (nq + nb) / (1 + fmin)) end
local find, byte = string.find, string.byte
local seen, hits, best = {}, {}, 0
for i = 1, prefix do
  -- A candidate not met yet is in none of the postings read so far, so it shares at
  -- most nq - i + 1 tokens: similarity (nq - i + 1) / nq at best. Stop when the best
  -- found beats that (strictly: a tie could be more recent).
  if best > (nq - i + 1) / nq + 1e-12 then break end
  local r = redis.call('ZREVRANGEBYSCORE', order[i][1], '+inf', '(' .. ARGV[1], 'LIMIT', 0, scan)
  for j = 1, #r do
    local m = r[j]
    if not seen[m] then
      seen[m] = true
      local hi, lo = byte(m, 1, 2)
      local nb = (hi or 0) * 256 + (lo or 0)
      local want = needs[nb]
      if want then
        -- It holds this posting's token; check the others, rarest first, and stop as
        -- soon as the rest cannot make up the shortfall.
        local c, left = 1, nq - 1
        for k = 1, nq do
          if k ~= i then
            if c + left < want then break end
            left = left - 1
            if find(m, order[k][3], 3, true) then c = c + 1 end
          end
        end
        if c >= want then
          local sim = c / (nq + nb - c)
          hits[#hits + 1] = {m, sim, i, nb}
          if sim > best then best = sim end
        end
      end
    end
  end
end
-- Ties go to the most recently stored: the greatest expiry.
for _, h in ipairs(hits) do
  h[5] = tonumber(redis.call('ZSCORE', order[h[3]][1], h[1])) or 0
end
table.sort(hits, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  if a[5] ~= b[5] then return a[5] > b[5] end
  return a[1] > b[1]
end)
for i = 1, math.min(#hits, tonumber(ARGV[5])) do
  local m = hits[i][1]
  local key = ARGV[4] .. string.sub(m, 3 + 3 * hits[i][4])
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then
    -- A write, refused by a full Redis: serve the entry unmarked (see getScript).
    local n = redis.pcall('INCR', KEYS[2])
    if type(n) == 'number' then redis.pcall('ZADD', KEYS[1], 'XX', n, key) end
    return {v, m}
  end
  if not v then
    -- Evicted or expired: drop the dangling member from the query's postings (left for
    -- a later lookup when a full Redis refuses the write).
    for j = 3, #KEYS do redis.pcall('ZREM', KEYS[j], m) end
  end
end
return false
`)
