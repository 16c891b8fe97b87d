package rank

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/tree"
)

// persistDocs has a path twice (the later wins, leaving a stem counted by no document),
// words outside ASCII, and the paths PathText treats apart (_archived, .stub, _index),
// so the round trip covers the whole of a corpus's state.
func persistDocs() []*tree.Document {
	return append(corpusDocs(),
		&tree.Document{Path: "ops/oncall.md", Title: "Straße und Café", Content: "Ελλάδα 東京 résumé ﬁle"},
		&tree.Document{Path: "auth/sessions.md", Title: "Sessions", Content: "Replaced: idle sessions end."},
		&tree.Document{Path: "ops/_index.md", Title: "Operations", Content: "Runbooks.", Summary: true},
	)
}

func encode(t testing.TB, c *Corpus, key string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteTo(&b, key); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A corpus read back is the corpus written: every field a query reads, alike.
func TestCorpusRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		docs []*tree.Document
	}{
		{"documents", persistDocs()},
		{"no documents", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := NewCorpus(tc.docs)
			got, err := ReadCorpus(bytes.NewReader(encode(t, want, "fp")), "fp")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back:\n%+v\nwritten:\n%+v", got, want)
			}
		})
	}
	if c := NewCorpus(persistDocs()); c.DF("replac") != 1 || c.DF("refresh") != 1 {
		t.Fatal("persistDocs no longer replaces a document")
	}
}

// A corpus changed by writes (With) and read back is the corpus a start computes from
// the same documents: stems no document holds any more are not carried over, and every
// other figure a query reads is alike. The search service keeps the statistics of a
// written knowledge base this way when it stops.
func TestAChangedCorpusReadsBackAsNewCorpus(t *testing.T) {
	docs := persistDocs()
	changed := &tree.Document{Path: "auth/sessions.md", Title: "Sessions", Content: "Sessions expire after an hour."}
	added := &tree.Document{Path: "ops/kafka.md", Title: "Kafka", Content: "Consumer lag alerts page."}
	written := NewCorpus(docs).With([]*tree.Document{changed, added}, []string{"ops/oncall.md"})
	var left []*tree.Document
	for _, d := range docs {
		if d.Path != "ops/oncall.md" && d.Path != changed.Path {
			left = append(left, d)
		}
	}
	want := NewCorpus(append(left, changed, added))
	if len(written.vocab) == len(want.vocab) {
		t.Fatal("the writes left no stem without a document; the test needs one")
	}
	got, err := ReadCorpus(bytes.NewReader(encode(t, written, "fp")), "fp")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(canonical(got), canonical(want)) {
		t.Errorf("read back:\n%+v\nwant:\n%+v", canonical(got), canonical(want))
	}
}

// canonicalCorpus is a corpus without its term ids, which depend on the order stems
// were first seen in.
type canonicalCorpus struct {
	DF       map[string]uint32
	Docs     map[string][]string // path → its stems, sorted
	Alphabet []rune
}

func canonical(c *Corpus) canonicalCorpus {
	out := canonicalCorpus{DF: map[string]uint32{}, Docs: map[string][]string{}, Alphabet: c.alphabet}
	byID := make([]string, len(c.df))
	for s, id := range c.vocab {
		byID[id] = s
		out.DF[s] = c.df[id]
	}
	for p, ids := range c.docs {
		stems := make([]string, len(ids))
		for i, id := range ids {
			stems[i] = byID[id]
		}
		slices.Sort(stems)
		out.Docs[p] = stems
	}
	return out
}

// A corpus written for other documents, or by a version whose words or format differ,
// is stale, not misread.
func TestReadCorpusStale(t *testing.T) {
	data := encode(t, NewCorpus(persistDocs()), "fp")
	if _, err := ReadCorpus(bytes.NewReader(data), "other"); !errors.Is(err, ErrStale) {
		t.Errorf("another key: err = %v, want ErrStale", err)
	}
	// The text version is stored as written; another one in its place is stale too
	// (the checksum is recomputed so that only the version differs).
	format := string(rune(corpusFormat)) // one byte while it is below 128
	v := []byte(corpusMagic + format + string(rune(len(text.Version))) + text.Version)
	other := bytes.Replace(data[:len(data)-4], v, []byte(corpusMagic+format+"\x01~"), 1)
	if bytes.Equal(other, data[:len(data)-4]) {
		t.Fatal("version not found in the header")
	}
	if _, err := ReadCorpus(bytes.NewReader(withChecksum(other)), "fp"); !errors.Is(err, ErrStale) {
		t.Errorf("another text version: err = %v, want ErrStale", err)
	}
	// Another format is stale however it lays out the rest.
	future := []byte(corpusMagic + string(rune(corpusFormat+1)) + "\xff\xff\xff\xff\xff")
	if _, err := ReadCorpus(bytes.NewReader(withChecksum(future)), "fp"); !errors.Is(err, ErrStale) {
		t.Errorf("another format: err = %v, want ErrStale", err)
	}
}

// Every damage to a file is an error, never a corpus that says something else.
func TestReadCorpusDamaged(t *testing.T) {
	data := encode(t, NewCorpus(persistDocs()), "fp")
	check := func(name string, b []byte) {
		t.Helper()
		c, err := ReadCorpus(bytes.NewReader(b), "fp")
		if err == nil || errors.Is(err, ErrStale) {
			t.Errorf("%s: got %v, %v; want an error", name, c, err)
		}
	}
	for n := range len(data) {
		check("cut short", data[:n])
	}
	for i := range data {
		b := bytes.Clone(data)
		b[i] ^= 0x20
		check("a byte changed", b)
	}
	check("a byte added", append(bytes.Clone(data), 0))
	check("not a corpus", []byte(strings.Repeat("x", 100)))
}

// A damaged body under a valid checksum (a writer's bug, not the disk's) is refused by
// the decoder's own checks.
func FuzzReadCorpus(f *testing.F) {
	data := encode(f, NewCorpus(persistDocs()), "fp")
	f.Add(data[:len(data)-4])
	f.Add(encode(f, NewCorpus(nil), "fp"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ReadCorpus(bytes.NewReader(withChecksum(body)), "fp")
		if err != nil {
			return
		}
		// Whatever it accepts is a whole corpus: written again, it reads back the same.
		again, err := ReadCorpus(bytes.NewReader(encode(t, c, "fp")), "fp")
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Errorf("accepted %+v, which reads back as %+v, %v", c, again, err)
		}
	})
}

func withChecksum(body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

// corpusDigests records, for each corpusFormat and text.Version, a digest of the corpus
// persistDocs make, as WriteTo writes it.
var corpusDigests = map[string]string{
	"1/1": "3eeaaa8637bc8de459a8b5a169e579cdd18c6940b00a1a7e37e2950d20c11f95",
	"2/1": "ca204414f429ab05220440c21c12efd5f592cd24208f2d5641ae1e9d4aaf6f96",
}

// TestCorpusFormatNamesTheDerivation fails when the stems a corpus holds for the same
// documents change while corpusFormat and text.Version stay: a restart would then read
// kept statistics that differ from what it computes.
func TestCorpusFormatNamesTheDerivation(t *testing.T) {
	sum := sha256.Sum256(encode(t, NewCorpus(persistDocs()), "fp"))
	got := hex.EncodeToString(sum[:])
	v := fmt.Sprintf("%d/%s", corpusFormat, text.Version)
	if want := corpusDigests[v]; got != want {
		t.Errorf("the corpus of the same documents changed (digest %s, want %q for %s): "+
			"bump corpusFormat (or text.Version) and record the new digest in corpusDigests", got, want, v)
	}
}
