package tree

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fastCases are front matter blocks of every shape: those fastFrontMatter reads and
// those it leaves to yaml.v3. They seed the fuzz test too.
var fastCases = []struct {
	name, src string
	fast      bool
}{
	{"the example knowledge base's", "title: Connection pooling with PgBouncer\ntags: [postgres, pgbouncer, pooling, connections]\nrelated: [data/postgres/connection-limits.md]\nimportance: 71\nmaturity: core\nupdated: 2026-08-27\nowner: team-data\n", true},
	{"kbgen's", "title: \"Kafka consumer lag\"\ntags: [kafka, lag]\nrelated: [data/kafka/a.md, data/kafka/b.md]\nimportance: 5\nmaturity: draft\nupdated: 2026-01-02\n", true},
	{"blank lines", "\ntitle: x\n\n\nowner: y\n\n", true},
	{"nothing but blank lines", "\n\n", true},
	{"empty", "", true},
	{"an empty value", "title:\ntags:\n", true},
	{"spaces around a value", "title:    spaced   out  \n", true},
	{"values YAML types", "a: yes\nb: 1e3\nc: 0x1F\nd: null\ne: true\nf: 1_000\ng: 0o17\nh: 1:20\nj: 3.5\nk: Null\nl: NaN\n", true},
	{"a list of typed scalars", "x: [1, 2.5, true, null, yes]\n", true},
	{"an empty list", "tags: []\nrelated: [ ]\n", true},
	{"a timestamp", "updated: 2026-08-27T10:00:00Z\nwhen: 2026-08-27T10:00:00+02:00\n", true},
	{"comma-separated tags", "tags: auth, jwt , keys\n", true},
	{"quoted strings", "title: \"it's: #1\"\nsub: 'say \"hi\"'\n", true},
	{"keys differing in case", "Title: a\ntitle: b\n", true},
	{"a list where a string belongs", "title: [a]\n", true},
	{"importance out of range", "importance: 101\n", true},
	{"a URL", "source: https://example.com/a/b\n", true},
	{"non-ASCII words", "title: Straße über Café 東京\n", true},
	{"a decomposed letter", "title: cafe\u0301\n", true},
	{"the longest key YAML reads", strings.Repeat("k", 1024) + ": v\n", true},

	{"a comment", "title: x # note\n", false},
	{"a comment line", "# note\ntitle: x\n", false},
	{"a block list", "tags:\n  - a\n  - b\n", false},
	{"an indented line", "  title: x\n", false},
	{"an anchor", "a: &x [1]\nb: *x\n", false},
	{"a tag", "a: !!str 1\n", false},
	{"an escape", "title: \"a\\tb\"\n", false},
	{"a doubled quote", "title: 'it''s'\n", false},
	{"CRLF", "title: x\r\n", false},
	{"a tab", "title:\tx\n", false},
	{"a nested list", "x: [[1], 2]\n", false},
	{"a flow mapping", "x: {a: 1}\n", false},
	{"a pair in a list", "x: [a: 1]\n", false},
	{"a trailing comma in a list", "x: [a, ]\n", false},
	{"key and value without a space", "title:x\n", false},
	{"a value with ': '", "title: a: b\n", false},
	{"a value ending in a colon", "title: a:\n", false},
	{"a value starting with an indicator", "x: -1\ny: .inf\nz: ~\ni: +1\n", false},
	{"a quoted key", "\"title\": x\n", false},
	{"a duplicate key", "title: a\ntitle: b\n", false},
	{"a multi-line value", "title: a\n  b\n", false},
	{"a directive", "%YAML 1.2\n", false},
	{"a key too long for YAML", strings.Repeat("k", 1025) + ": v\n", false},
	{"a no-break space", "title: a\u00a0b\n", false},
	{"a line separator", "title: a\u2028b\n", false},
}

func TestFastFrontMatterMatchesYAML(t *testing.T) {
	for _, tc := range fastCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := fastFrontMatter([]byte(tc.src)); ok != tc.fast {
				t.Errorf("read by the fast path: %v, want %v", ok, tc.fast)
			}
			sameAsYAML(t, []byte(tc.src))
		})
	}
}

// The front matter of the example knowledge base is read by the fast path, as most
// front matter is: otherwise the fast path is code that saves nothing.
func TestFastFrontMatterReadsTheExampleKnowledgeBase(t *testing.T) {
	var fast, all int
	err := filepath.WalkDir("../../../examples/kb", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fm, _, err := splitFrontMatter(data, 1<<16)
		if err != nil || fm == nil {
			return err
		}
		all++
		if _, ok := fastFrontMatter(fm); ok {
			fast++
		} else {
			t.Logf("not read by the fast path: %s", p)
		}
		sameAsYAML(t, fm)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if all < 40 || fast != all {
		t.Errorf("fast path read %d of %d front matter blocks, want all of them", fast, all)
	}
}

// sameAsYAML fails the test when the fast path reads src and interprets it otherwise
// than yaml.v3 does, error messages included.
func sameAsYAML(t *testing.T, src []byte) {
	t.Helper()
	if _, ok := fastFrontMatter(src); !ok {
		return
	}
	fast, ferr := decodeFrontMatter(src, true)
	slow, serr := decodeFrontMatter(src, false)
	if fmt.Sprint(ferr) != fmt.Sprint(serr) || !reflect.DeepEqual(fast, slow) {
		t.Errorf("front matter %q:\nfast path %+v, %v\nyaml.v3   %+v, %v", src, fast, ferr, slow, serr)
	}
}

func FuzzFastFrontMatterMatchesYAML(f *testing.F) {
	for _, tc := range fastCases {
		f.Add([]byte(tc.src))
	}
	f.Fuzz(func(t *testing.T, src []byte) { sameAsYAML(t, src) })
}

// BenchmarkFrontMatter parses the example knowledge base's most common front matter
// through yaml.v3 and through the fast path.
func BenchmarkFrontMatter(b *testing.B) {
	src := []byte(fastCases[0].src)
	for _, bc := range []struct {
		name string
		fast bool
	}{{"yaml.v3", false}, {"fast", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeFrontMatter(src, bc.fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
