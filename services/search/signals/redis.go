package signals

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisPool is one knowledge base's Pool in Redis, which the gateway replicas share
// already: a stream of batches, <prefix>signals:{<kb>}, whose ids are Redis's clock and
// the cursors, trimmed to about MaxBatches; each replica's last batch number and its
// place in the stream, a hash <prefix>signals:{<kb>}:marks, so that a batch published
// again (its reply lost) is found rather than added twice; and the newest snapshot, a
// hash <prefix>signals:{<kb>}:snapshot of its cursor and its state (gzipped JSON). None
// has a time to live, so a volatile-lru maxmemory policy (the deployment's) never
// evicts them; the braces keep a knowledge base's keys on one Redis Cluster shard, as
// the publish script needs.
type RedisPool struct {
	c        redis.UniversalClient
	stream   string
	marks    string
	snapshot string
	timeout  time.Duration
}

// MaxBatches is about how many batches a pool's stream keeps (Redis trims it in whole
// nodes, so a few more). A replica flushes at most once a second and offers a snapshot
// every minute, so this covers the batches since the last snapshot for up to ~160
// replicas, in a few MiB.
const MaxBatches = 10000

// NewRedisPool returns the pool of knowledge base kb on client, whose keys start with
// prefix (redisx.Config.Prefix); each call is bounded by timeout.
func NewRedisPool(client redis.UniversalClient, prefix, kb string, timeout time.Duration) *RedisPool {
	stream := prefix + "signals:{" + kb + "}"
	return &RedisPool{c: client, stream: stream, marks: stream + ":marks", snapshot: stream + ":snapshot", timeout: timeout}
}

// Publish adds b to the stream, with the id of the entry before it: a reader whose
// cursor was trimmed away tells from the first entry left whether it missed any. A
// batch whose number (Batch.ID is "<replica>.<n>") is not above its replica's last
// is in the stream already, published before its reply was lost: it is not added
// again, and the place returned is that of the replica's last batch, at or after its
// own. A store publishes its batches in the order of their numbers, so that holds.
func (p *RedisPool) Publish(ctx context.Context, b Batch) (string, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return "", err
	}
	replica, n, _ := strings.Cut(b.ID, ".")
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return publishScript.Run(ctx, p.c, []string{p.stream, p.marks}, raw, MaxBatches, replica, n, maxMarks, markIdle.Milliseconds()).Text()
}

// Past maxMarks marks (one per search process that published: a reload keeps its
// name, a restart takes a new one), the pool forgets those whose replica has published
// nothing for markIdle: a partition that long may count a lost reply twice.
const (
	maxMarks = 1024
	markIdle = 24 * time.Hour
)

// Read returns the batches after cursor, and whether any were trimmed before they
// were read, in one script. Trimming removes the oldest entries, so while the cursor's
// own entry is in the stream nothing after it is gone; once it is not, entries after it
// were trimmed unless the first entry left is the one that followed it (each entry
// names the one before it) or the stream's first ever (Redis restarted without
// persistence: what was lost with it is not known, and the new stream lost nothing), or,
// with the stream empty, unless the cursor was the last entry.
//
// A stream's ids alone cannot tell a new stream whose clock started behind a cursor
// (Redis restarted empty on a slower clock) from the same stream after a failover lost
// its last entries: read again from the start, the second would count every batch
// twice. So a cursor is always read on from, and a new stream's entries stamped before
// it are not read (NTP keeps clocks within milliseconds; a failover's lost entries are
// lost to the replicas that had not read them).
func (p *RedisPool) Read(ctx context.Context, cursor string, max int) ([]Pooled, bool, error) {
	if !streamID.MatchString(cursor) {
		// "" reads from the start, and so does a cursor that is no stream id (a hand
		// edit of signals.json), which Redis would refuse at every read.
		cursor = "0-0"
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, err := readScript.Run(ctx, p.c, []string{p.stream}, cursor, max).Slice()
	if err != nil {
		return nil, false, err
	}
	if len(res) != 2 {
		return nil, false, fmt.Errorf("read script replied %d values, want 2", len(res))
	}
	entries, _ := res[1].([]any)
	out := make([]Pooled, 0, len(entries))
	for _, e := range entries {
		pb, err := decodeEntry(e)
		if err != nil && pb.ID == "" {
			return nil, false, fmt.Errorf("%s: %w", p.stream, err)
		}
		// An entry whose batch cannot be read (another release's format, a hand-made
		// entry) is passed by, or every replica would stop at it for good.
		pb.Err = err
		out = append(out, pb)
	}
	return out, res[0] == int64(1), nil
}

// decodeEntry decodes a stream entry, [id, [field, value, ...]]. An entry with an id
// whose batch cannot be read is returned with its id and an empty batch, and the error.
func decodeEntry(e any) (Pooled, error) {
	pair, _ := e.([]any)
	if len(pair) != 2 {
		return Pooled{}, fmt.Errorf("stream entry %v: want an id and fields", e)
	}
	id, _ := pair[0].(string)
	ms, _, ok := strings.Cut(id, "-")
	stamp, err := strconv.ParseUint(ms, 10, 64)
	if !ok || err != nil {
		return Pooled{}, fmt.Errorf("stream entry id %q: want <milliseconds>-<sequence>", id)
	}
	// Redis takes ids up to 2^64-1 ms, and every later id follows the largest: one past
	// any time (a hand-made id) is read as the latest time there is, which applyPooled
	// takes as far ahead and applies as of now, like every entry after it.
	pb := Pooled{ID: id, At: time.UnixMilli(int64(min(stamp, maxStamp)))}
	fields, _ := pair[1].([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "b" {
			raw, _ := fields[i+1].(string)
			err := json.Unmarshal([]byte(raw), &pb.Batch)
			if err == nil {
				err = pb.Batch.check()
			}
			if err != nil {
				pb.Batch = Batch{}
				return pb, fmt.Errorf("stream entry %s: %w", id, err)
			}
			return pb, nil
		}
	}
	return pb, fmt.Errorf("stream entry %s: no batch", id)
}

// maxStamp is the last millisecond of the year 9999, past which a stream id is no time.
const maxStamp = 253402300799999

// snapshotTimeout bounds a snapshot's save or load, which carries a knowledge base's
// every record (compressed, about a megabyte for 100,000 files).
const snapshotTimeout = 10 * time.Second

// snapshotFormat names how the snapshot's state is written: a release reads only its
// own, and a snapshot it cannot read is dropped, so that the next offer replaces it.
const snapshotFormat = "gzip+json/1"

// SnapshotAt returns the stamp of the kept snapshot's cursor.
func (p *RedisPool) SnapshotAt(ctx context.Context) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c, err := p.c.HGet(ctx, p.snapshot, "cursor").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	}
	return stamp(c), true, nil
}

// SaveSnapshot keeps build's snapshot unless the one kept is at or after cursor. The
// check and the write are one optimistic transaction (WATCH), not a script: a script
// would hold Redis, and with it every gateway's cache call, while it copied the
// snapshot. Each socket read or write of it is bounded by the client's timeout too
// (redisx: -redis-timeout, at least 250 ms), which a megabyte on a LAN meets.
func (p *RedisPool) SaveSnapshot(ctx context.Context, cursor string, build func() Snapshot) error {
	ctx, cancel := context.WithTimeout(ctx, max(p.timeout, snapshotTimeout))
	defer cancel()
	err := p.c.Watch(ctx, func(tx *redis.Tx) error {
		kept, err := tx.HGet(ctx, p.snapshot, "cursor").Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return err
		case !cursorIsBefore(kept, cursor):
			return nil
		}
		raw, err := encodeSnapshot(build())
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, p.snapshot)
			pipe.HSet(ctx, p.snapshot, "cursor", cursor, "format", snapshotFormat, "state", raw)
			return nil
		})
		return err
	}, p.snapshot)
	if errors.Is(err, redis.TxFailedErr) {
		return nil // another replica saved one meanwhile
	}
	return err
}

// LoadSnapshot returns the pool's snapshot, if it keeps one later than after. One it
// cannot read (another release's format, a hand edit) is dropped, unless another
// replica replaced it meanwhile, and reported as ErrUnreadable.
func (p *RedisPool) LoadSnapshot(ctx context.Context, after string) (Snapshot, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, max(p.timeout, snapshotTimeout))
	defer cancel()
	vals, err := p.c.HMGet(ctx, p.snapshot, "cursor", "format", "state").Result()
	if err != nil {
		return Snapshot{}, false, err
	}
	cursor, _ := vals[0].(string)
	format, _ := vals[1].(string)
	raw, _ := vals[2].(string)
	if cursor == "" || !cursorIsBefore(after, cursor) {
		return Snapshot{}, false, nil
	}
	s, err := decodeSnapshot(format, raw)
	if err != nil {
		err = fmt.Errorf("%s at %s: %w", p.snapshot, cursor, err)
		if derr := p.dropSnapshot(ctx, cursor); derr != nil {
			return Snapshot{}, false, errors.Join(err, fmt.Errorf("drop it: %w", derr))
		}
		return Snapshot{}, false, fmt.Errorf("%w: %w; dropped, for the next offer to replace", ErrUnreadable, err)
	}
	s.Cursor, s.At = cursor, stamp(cursor)
	return s, true, nil
}

// dropSnapshot deletes the snapshot if it is still the one at cursor.
func (p *RedisPool) dropSnapshot(ctx context.Context, cursor string) error {
	err := p.c.Watch(ctx, func(tx *redis.Tx) error {
		kept, err := tx.HGet(ctx, p.snapshot, "cursor").Result()
		if err != nil || kept != cursor {
			return nil
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, p.snapshot)
			return nil
		})
		return err
	}, p.snapshot)
	if errors.Is(err, redis.TxFailedErr) {
		return nil
	}
	return err
}

// encodeSnapshot is the snapshot as gzipped JSON: a tenth of its size, so saving and
// loading it keeps Redis busy for a tenth of the time.
func encodeSnapshot(s Snapshot) ([]byte, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := json.NewEncoder(zw).Encode(s); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeSnapshot(format, raw string) (Snapshot, error) {
	var s Snapshot
	if format != snapshotFormat {
		return s, fmt.Errorf("format %q, not this release's %q", format, snapshotFormat)
	}
	zr, err := gzip.NewReader(strings.NewReader(raw))
	if err != nil {
		return s, err
	}
	defer zr.Close()
	err = json.NewDecoder(zr).Decode(&s)
	return s, err
}

// cursorBefore is cursorIsBefore in Lua, for the scripts.
const cursorBefore = `
local function before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am or 0), tonumber(as or 0), tonumber(bm or 0), tonumber(bs or 0)
  return am < bm or (am == bm and as < bs)
end
`

// publishScript adds the batch ARGV[1], number ARGV[4] of replica ARGV[3], to the
// stream, trimmed to about ARGV[2] entries, with field p naming the entry before it
// ("0-0" none), and returns its id; unless the replica's mark says a batch of that
// number or a later one is in already, whose id it returns then. Past ARGV[5] marks,
// those of replicas idle for ARGV[6] ms (of the stream's clock) are dropped, looked
// for when a new replica's mark is added. KEYS: stream, marks.
var publishScript = redis.NewScript(`
local n = tonumber(ARGV[4])
if n then
  local mark = redis.call('HGET', KEYS[2], ARGV[3])
  if mark then
    local m, id = string.match(mark, '^(%d+) (.+)$')
    if m and tonumber(m) >= n then return id end
  end
end
local prev = '0-0'
local info = redis.pcall('XINFO', 'STREAM', KEYS[1])
if not info.err then
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then prev = info[i + 1] end
  end
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'b', ARGV[1], 'p', prev)
if n then
  local added = redis.call('HSET', KEYS[2], ARGV[3], ARGV[4] .. ' ' .. id)
  if added == 1 and redis.call('HLEN', KEYS[2]) > tonumber(ARGV[5]) then
    local now = tonumber(string.match(id, '^(%d+)'))
    local marks = redis.call('HGETALL', KEYS[2])
    for i = 1, #marks, 2 do
      local at = tonumber(string.match(marks[i + 1], ' (%d+)%-%d+$') or 0)
      if now - at > tonumber(ARGV[6]) then redis.call('HDEL', KEYS[2], marks[i]) end
    end
  end
end
return id`)

// readScript returns {trimmed, entries}: entries are up to ARGV[2] entries after the
// cursor ARGV[1] ("0-0": from the start), and trimmed is 1 when entries after it were
// removed (see Read). No stream yet: nothing was trimmed, and nothing follows.
// KEYS: stream.
var readScript = redis.NewScript(cursorBefore + `
local info = redis.pcall('XINFO', 'STREAM', KEYS[1])
if info.err then return {0, {}} end
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local cursor = ARGV[1]
local trimmed = 0
if cursor == '0-0' or #redis.call('XRANGE', KEYS[1], cursor, cursor) == 0 then
  local first = f['first-entry']
  if type(first) == 'table' and #first > 0 then
    local prev = '0-0'
    for i = 1, #first[2], 2 do
      if first[2][i] == 'p' then prev = first[2][i + 1] end
    end
    if prev ~= cursor and prev ~= '0-0' and before(cursor, first[1]) then trimmed = 1 end
  elseif before(cursor, f['last-generated-id']) then
    trimmed = 1
  end
end
return {trimmed, redis.call('XRANGE', KEYS[1], '(' .. cursor, '+', 'COUNT', ARGV[2])}`)

// streamID is the form of a stream entry id, and so of a cursor.
var streamID = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// cursorIsBefore reports whether stream id a comes before b ("" before every other).
func cursorIsBefore(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

// stamp is the pool's time a stream id carries.
func stamp(id string) time.Time {
	ms, _ := splitID(id)
	return time.UnixMilli(int64(ms))
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
