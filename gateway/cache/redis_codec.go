package cache

import (
	"encoding/binary"
	"errors"
	"time"
)

// entryMagic starts every entry the Redis store writes; the digit is the format version,
// so a future format is a miss for an older gateway instead of a misread.
const entryMagic = "QCE1"

var errBadEntry = errors.New("cache: malformed entry")

// encodeEntry lays e out as magic, KB, generation, query, stored-at and expiry
// instants, tokens, then the value. Everything a lookup must verify travels with the
// value, so a key that collides (a hashed long query) or holds foreign bytes cannot be
// served as this question's answer.
func encodeEntry(e *Entry, expires time.Time) []byte {
	n := len(entryMagic) + 5*binary.MaxVarintLen64 + e.Size() + len(e.Tokens)*binary.MaxVarintLen64
	b := make([]byte, 0, n)
	b = append(b, entryMagic...)
	b = appendString(b, e.KB)
	b = binary.AppendUvarint(b, e.Generation)
	b = appendString(b, e.Query)
	b = binary.AppendVarint(b, e.StoredAt.UnixNano())
	b = binary.AppendVarint(b, expires.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(e.Tokens)))
	for _, t := range e.Tokens {
		b = appendString(b, t)
	}
	return append(b, e.Value...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeEntry parses what encodeEntry wrote, returning the entry and its expiry. Any
// other bytes are errBadEntry; it never panics on them.
func decodeEntry(b []byte) (*Entry, time.Time, error) {
	d := decoder{b: b}
	if len(b) < len(entryMagic) || string(b[:len(entryMagic)]) != entryMagic {
		return nil, time.Time{}, errBadEntry
	}
	d.b = b[len(entryMagic):]
	e := &Entry{}
	e.KB = d.string()
	e.Generation = d.uvarint()
	e.Query = d.string()
	e.StoredAt = time.Unix(0, d.varint())
	expires := time.Unix(0, d.varint())
	n := d.uvarint()
	// Each token takes at least one byte, which bounds the allocation by the input.
	if n > uint64(len(d.b)) {
		return nil, time.Time{}, errBadEntry
	}
	if n > 0 {
		e.Tokens = make([]string, 0, n)
	}
	for range n {
		e.Tokens = append(e.Tokens, d.string())
	}
	if d.bad {
		return nil, time.Time{}, errBadEntry
	}
	e.Value = d.b
	e.expires = expires
	return e, expires, nil
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
