package rank

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"

	"github.com/quarry-router/quarry/platform/text"
)

// A corpus is kept beside a knowledge base's index so that a restart does not tokenise
// and stem every document again: that was half of the CPU a restart spent before its
// first answer (SPEC §5: under 1 s). The format is private to this package:
//
//	magic, format, text.Version, key        header
//	stems (in term-id order)                 uvarint count, then each uvarint length + bytes
//	documents (paths and term ids ascending) uvarint count, then each path and its ids, deltas
//	CRC-32C of everything before it          4 bytes, big endian
const (
	corpusMagic = "quarry-corpus\n"
	// corpusFormat names the layout and how a document's stems are derived (docStems,
	// engine.PathText); text.Version, written beside it, names the words and stems.
	// Bump it with a change to either: TestCorpusFormatNamesTheDerivation fails until
	// then. 2: stems no document holds are not written, and of documents given twice
	// only the last is counted.
	corpusFormat = 2
)

// ErrStale is returned by ReadCorpus for a corpus written under another key, format or
// text version: it no longer says what NewCorpus would compute.
var ErrStale = errors.New("corpus written for other documents or by another version")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteTo writes c in the format ReadCorpus reads, labelled with key: whatever
// identifies the documents it was computed from (their content's fingerprint).
func (c *Corpus) WriteTo(w io.Writer, key string) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var buf [binary.MaxVarintLen64]byte
	putUint := func(n uint64) { bw.Write(buf[:binary.PutUvarint(buf[:], n)]) }
	putString := func(s string) { putUint(uint64(len(s))); bw.WriteString(s) }

	bw.WriteString(corpusMagic)
	putUint(corpusFormat)
	putString(text.Version)
	putString(key)
	// Stems no document holds any more (With removed their last one) are left out, so
	// that the corpus read back is the one NewCorpus computes from the same documents:
	// the ids of the rest close up, in order, which keeps each document's ids ascending.
	byID := make([]string, len(c.df))
	for s, id := range c.vocab {
		byID[id] = s
	}
	kept := make([]uint32, len(c.df)) // old id → new id
	stems := byID[:0:0]
	for id, s := range byID {
		if c.df[id] > 0 {
			kept[id] = uint32(len(stems))
			stems = append(stems, s)
		}
	}
	putUint(uint64(len(stems)))
	for _, s := range stems {
		putString(s)
	}
	putUint(uint64(len(c.docs)))
	for _, p := range slices.Sorted(maps.Keys(c.docs)) {
		putString(p)
		ids := c.docs[p]
		putUint(uint64(len(ids)))
		prev := uint32(0)
		for _, id := range ids {
			putUint(uint64(kept[id] - prev))
			prev = kept[id]
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write corpus: %w", err)
	}
	if _, err := w.Write(crc.Sum(nil)); err != nil {
		return fmt.Errorf("write corpus: %w", err)
	}
	return nil
}

// ReadCorpus reads a corpus WriteTo wrote with the same key. It returns ErrStale for
// one written under another key or version, and an error for a damaged one.
func ReadCorpus(r io.Reader, key string) (*Corpus, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	if len(data) < len(corpusMagic)+4 || string(data[:len(corpusMagic)]) != corpusMagic {
		return nil, errors.New("read corpus: not a corpus file")
	}
	body, sum := data[:len(data)-4], data[len(data)-4:]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(sum) {
		return nil, errors.New("read corpus: checksum mismatch")
	}
	d := &corpusReader{b: body[len(corpusMagic):]}
	return d.corpus(key)
}

// corpusReader decodes a checksummed body; the first error sticks.
type corpusReader struct {
	b   []byte
	err error
}

func (d *corpusReader) uint() uint64 {
	if d.err != nil {
		return 0
	}
	n, size := binary.Uvarint(d.b)
	if size <= 0 {
		d.err = errors.New("read corpus: bad number")
		return 0
	}
	d.b = d.b[size:]
	return n
}

func (d *corpusReader) string() string {
	n := d.uint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("read corpus: a %d-byte string in %d bytes", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// count reads how many items follow, each at least a byte long: no more than the
// bytes left, so a damaged count cannot size an allocation.
func (d *corpusReader) count() int {
	n := d.uint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = fmt.Errorf("read corpus: %d items in %d bytes", n, len(d.b))
	}
	return int(n)
}

func (d *corpusReader) corpus(key string) (*Corpus, error) {
	// The format first: another one may lay out even the rest of the header otherwise.
	if format := d.uint(); d.err == nil && format != corpusFormat {
		return nil, ErrStale
	}
	if version, k := d.string(), d.string(); d.err == nil && (version != text.Version || k != key) {
		return nil, ErrStale
	}
	nstems := d.count()
	if d.err != nil {
		return nil, d.err
	}
	c := &Corpus{vocab: make(map[string]uint32, nstems)}
	runes := map[rune]struct{}{}
	for i := range nstems {
		s := d.string()
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := c.vocab[s]; dup {
			return nil, fmt.Errorf("read corpus: bad stem %q", s)
		}
		c.vocab[s] = uint32(i)
		for _, r := range s {
			runes[r] = struct{}{}
		}
	}
	if nstems > 0 { // as NewCorpus leaves an empty corpus: nil
		c.df = make([]uint32, nstems)
		c.alphabet = slices.Sorted(maps.Keys(runes))
	}
	ndocs := d.count()
	c.docs = make(map[string][]uint32, ndocs)
	prev := ""
	for i := range ndocs {
		p := d.string()
		n := d.count()
		if d.err != nil {
			return nil, d.err
		}
		if n > nstems {
			return nil, fmt.Errorf("read corpus: %s has %d of %d stems", p, n, nstems)
		}
		ids := make([]uint32, n)
		next := uint64(0)
		for j := range ids {
			delta := d.uint()
			if j > 0 && delta == 0 {
				return nil, fmt.Errorf("read corpus: %s repeats a stem", p)
			}
			if next += delta; d.err != nil {
				return nil, d.err
			}
			if next >= uint64(nstems) {
				return nil, fmt.Errorf("read corpus: %s: stem %d of %d", p, next, nstems)
			}
			ids[j] = uint32(next)
			c.df[next]++
		}
		if i > 0 && p <= prev {
			return nil, fmt.Errorf("read corpus: %s after %s", p, prev)
		}
		prev = p
		c.docs[p] = ids
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("read corpus: %d bytes after the documents", len(d.b))
	}
	// WriteTo leaves out the stems no document holds: one here is damage, and accepted it
	// would widen Near's alphabet and read back (written again) as another corpus.
	if d.err == nil {
		for s, id := range c.vocab {
			if c.df[id] == 0 {
				return nil, fmt.Errorf("read corpus: stem %q in no document", s)
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}
