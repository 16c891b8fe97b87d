package tree

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

var mtime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

func TestSplitFrontMatter(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantFM   string
		wantBody string
		wantErr  string
	}{
		{"no front matter", "# Title\nbody\n", "", "# Title\nbody\n", ""},
		{"a block at the start is split off", "---\ntitle: x\n---\nbody\n", "title: x\n", "body\n", ""},
		{"an empty block", "---\n---\nbody", "", "body", ""},
		{"a closing line at the end of the file", "---\ntitle: x\n---", "title: x\n", "", ""},
		{"... closes a block too", "---\ntitle: x\n...\nbody", "title: x\n", "body", ""},
		{"CRLF line endings", "---\r\ntitle: x\r\n---\r\nbody\r\n", "title: x\r\n", "body\r\n", ""},
		{"a block not at the start is content", "\n---\ntitle: x\n---\n", "", "\n---\ntitle: x\n---\n", ""},
		{"--- followed by text is not an opening line", "--- title\nbody", "", "--- title\nbody", ""},
		{"a lone --- without a newline is content", "---", "", "---", ""},
		{"a block that never closes is refused", "---\ntitle: x\nbody\n", "", "", "no closing line"},
		{"an indented --- does not close", "---\ntitle: x\n ---\n", "", "", "no closing line"},
		{"a block over the limit is refused", "---\n" + strings.Repeat("k: v\n", 30) + "---\n", "", "", "100-byte limit"},
		{"a block over the limit without a close is refused", "---\n" + strings.Repeat("k: v\n", 30), "", "", "100-byte limit"},
		{"a block exactly at the limit is accepted", "---\n" + strings.Repeat("k: v\n", 20) + "---\nb", strings.Repeat("k: v\n", 20), "b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fm, body, err := splitFrontMatter([]byte(tt.in), 100)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if string(fm) != tt.wantFM || string(body) != tt.wantBody {
				t.Errorf("split = %q, %q; want %q, %q", fm, body, tt.wantFM, tt.wantBody)
			}
		})
	}
}

// fmWant is the parts of a Document a front matter test checks; empty fields are not
// checked unless the test says so through the zero-value-significant fields.
type fmWant struct {
	title      string
	tags       string // comma-joined
	related    string // comma-joined
	importance float64
	maturity   Maturity
	updated    time.Time // zero: the modification time
	extra      string    // JSON; "" means none
	content    string    // checked when non-empty
}

func TestParseDocumentFrontMatter(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		in      string
		want    fmWant
		wantErr string
	}{
		{
			name: "a file without front matter gets the defaults",
			in:   "# Hello\nbody\n",
			want: fmWant{title: "Hello", importance: 50, content: "# Hello\nbody\n"},
		},
		{
			name: "an empty block gets the defaults",
			in:   "---\n---\nbody",
			want: fmWant{title: "doc", importance: 50, content: "body"},
		},
		{
			name: "a null document gets the defaults",
			in:   "---\n~\n---\nbody",
			want: fmWant{title: "doc", importance: 50},
		},
		{
			name: "a byte order mark and CRLF endings are tolerated and content uses LF",
			in:   "\ufeff---\r\ntitle: Windows\r\n---\r\nline one\r\nline two\r\n",
			want: fmWant{title: "Windows", importance: 50, content: "line one\nline two\n"},
		},
		{
			name: "a multi-line title is folded to one line",
			in:   "---\ntitle: |\n  first\n  second\n---\n",
			want: fmWant{title: "first second", importance: 50},
		},
		{
			name: "a numeric title is kept as written",
			in:   "---\ntitle: 2024\n---\n",
			want: fmWant{title: "2024", importance: 50},
		},
		{
			name: "a null title falls back to the heading",
			in:   "---\ntitle:\n---\n# From heading\n",
			want: fmWant{title: "From heading", importance: 50},
		},
		{
			name: "a title of only white space falls back to the file name",
			in:   "---\ntitle: \"  \\t \"\n---\nno heading\n",
			want: fmWant{title: "doc", importance: 50},
		},
		{
			name: "keys are matched without regard to case",
			in:   "---\nTitle: Cased\nMATURITY: core\n---\n",
			want: fmWant{title: "Cased", importance: 50, maturity: Core},
		},
		{
			name: "a single tag string",
			in:   "---\ntags: jwt\n---\n",
			want: fmWant{title: "doc", tags: "jwt", importance: 50},
		},
		{
			name: "null and blank tags are dropped",
			in:   "---\ntags: [a, ~, \"\", \" b \"]\n---\n",
			want: fmWant{title: "doc", tags: "a,b", importance: 50},
		},
		{
			name: "numeric tags are kept as written",
			in:   "---\ntags: [2024, v1.0]\n---\n",
			want: fmWant{title: "doc", tags: "2024,v1.0", importance: 50},
		},
		{
			name: "related as a comma string is cleaned and escaping entries dropped",
			in:   "---\nrelated: \"a/b.md, ../x.md, ./c.md, a/b.md\"\n---\n",
			want: fmWant{title: "doc", related: "a/b.md,c.md", importance: 50},
		},
		{
			name: "related entries with backslashes or control characters are dropped",
			in:   "---\nrelated: [\"a\\\\b.md\", \"ok.md\", \"x\\u0001.md\"]\n---\n",
			want: fmWant{title: "doc", related: "ok.md", importance: 50},
		},
		{
			name: "importance 0 is accepted",
			in:   "---\nimportance: 0\n---\n",
			want: fmWant{title: "doc", importance: 0},
		},
		{
			name: "importance 100 is accepted",
			in:   "---\nimportance: 100\n---\n",
			want: fmWant{title: "doc", importance: 100},
		},
		{
			name: "a quoted numeric importance is accepted",
			in:   "---\nimportance: \"70\"\n---\n",
			want: fmWant{title: "doc", importance: 70},
		},
		{
			name: "a null importance keeps the default",
			in:   "---\nimportance: null\n---\n",
			want: fmWant{title: "doc", importance: 50},
		},
		{
			name: "maturity is trimmed and case-insensitive",
			in:   "---\nmaturity: \" CORE \"\n---\n",
			want: fmWant{title: "doc", importance: 50, maturity: Core},
		},
		{
			name: "updated with a zone offset",
			in:   "---\nupdated: 2024-05-01T10:00:00+02:00\n---\n",
			want: fmWant{title: "doc", importance: 50, updated: time.Date(2024, 5, 1, 8, 0, 0, 0, time.UTC)},
		},
		{
			name: "updated with fractional seconds",
			in:   "---\nupdated: \"2024-05-01T10:00:00.5Z\"\n---\n",
			want: fmWant{title: "doc", importance: 50, updated: time.Date(2024, 5, 1, 10, 0, 0, 5e8, time.UTC)},
		},
		{
			name: "an unparseable updated falls back to the modification time",
			in:   "---\nupdated: last tuesday\n---\n",
			want: fmWant{title: "doc", importance: 50},
		},
		{
			name: "updated as a list falls back to the modification time",
			in:   "---\nupdated: [2024-01-01]\n---\n",
			want: fmWant{title: "doc", importance: 50},
		},
		{
			name: "extra values keep their YAML types; ones JSON cannot hold keep their spelling",
			in: "---\ncount: 3\nratio: 0.5\nflag: true\nnothing: null\nwhen: 2024-01-01\nbig: 123456789012345678901234567890\n" +
				"inf: .inf\nblob: !!binary aGVsbG8=\ncustom: !thing value\nnested: {list: [1, two]}\n---\n",
			want: fmWant{title: "doc", importance: 50,
				extra: `{"big":1.2345678901234568e+29,"blob":"aGVsbG8=","count":3,"custom":"value","flag":true,"inf":".inf","nested":{"list":[1,"two"]},"nothing":null,"ratio":0.5,"when":"2024-01-01"}`},
		},
		{
			name: "_index.md without a title is named after its folder",
			path: "auth/jwt/_index.md", in: "text\n",
			want: fmWant{title: "jwt", importance: 50},
		},
		{
			name: "the root _index.md without a title is named after the root folder",
			path: "_index.md", in: "text\n",
			want: fmWant{title: "kb", importance: 50},
		},
		{name: "YAML that fails to parse is refused", in: "---\ntitle: [x\n---\n", wantErr: "front matter"},
		{name: "a list instead of a mapping is refused", in: "---\n- a\n---\n", wantErr: "not a mapping"},
		{name: "a scalar instead of a mapping is refused", in: "---\njust text\n---\n", wantErr: "not a mapping"},
		{name: "an alias is refused", in: "---\na: &x 1\nb: *x\n---\n", wantErr: "anchors and aliases"},
		{name: "a merge key through an alias is refused", in: "---\nbase: &b {x: 1}\nother:\n  <<: *b\n---\n", wantErr: "anchors and aliases"},
		{name: "a non-scalar key is refused", in: "---\n? [a, b]\n: c\n---\n", wantErr: "key is not a plain string"},
		{name: "a duplicate key is refused", in: "---\ntitle: a\ntitle: b\n---\n", wantErr: "duplicate key"},
		{name: "a duplicate nested key is refused", in: "---\nx: {a: 1, a: 2}\n---\n", wantErr: "front matter"},
		{name: "nesting deeper than the limit is refused", in: "---\nx: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n---\n", wantErr: "nested deeper"},
		{name: "importance above 100 is refused", in: "---\nimportance: 100.5\n---\n", wantErr: "importance"},
		{name: "negative importance is refused", in: "---\nimportance: -1\n---\n", wantErr: "importance"},
		{name: "infinite importance is refused", in: "---\nimportance: .inf\n---\n", wantErr: "importance"},
		{name: "NaN importance is refused", in: "---\nimportance: NaN\n---\n", wantErr: "importance"},
		{name: "a list importance is refused", in: "---\nimportance: [1]\n---\n", wantErr: "importance"},
		{name: "an unknown maturity is refused", in: "---\nmaturity: stable\n---\n", wantErr: "maturity"},
		{name: "a mapping maturity is refused", in: "---\nmaturity: {a: b}\n---\n", wantErr: "maturity"},
		{name: "nested tags are refused", in: "---\ntags: [[a]]\n---\n", wantErr: "tags must be"},
		{name: "a mapping of related paths is refused", in: "---\nrelated: {a: b}\n---\n", wantErr: "related must be"},
		{name: "NUL bytes are refused", in: "# x\x00\n", wantErr: "NUL"},
		{name: "invalid UTF-8 is refused", in: "# caf\xe9\n", wantErr: "UTF-8"},
		{name: "invalid UTF-8 inside front matter is refused", in: "---\ntitle: \xff\n---\n", wantErr: "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path
			if p == "" {
				p = "dir/doc.md"
			}
			d, _, err := parseDocument(p, []byte(tt.in), mtime, "kb", DefaultConfig())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			w := tt.want
			if d.Title != w.title {
				t.Errorf("Title = %q, want %q", d.Title, w.title)
			}
			if got := strings.Join(d.Tags, ","); got != w.tags {
				t.Errorf("Tags = %q, want %q", got, w.tags)
			}
			if got := strings.Join(d.Related, ","); got != w.related {
				t.Errorf("Related = %q, want %q", got, w.related)
			}
			if d.Importance != w.importance {
				t.Errorf("Importance = %v, want %v", d.Importance, w.importance)
			}
			if d.Maturity != w.maturity {
				t.Errorf("Maturity = %v, want %v", d.Maturity, w.maturity)
			}
			wantUpdated := w.updated
			if wantUpdated.IsZero() {
				wantUpdated = mtime
			}
			if !d.Updated.Equal(wantUpdated) {
				t.Errorf("Updated = %v, want %v", d.Updated, wantUpdated)
			}
			gotExtra := ""
			if d.Extra != nil {
				b, err := json.Marshal(d.Extra)
				if err != nil {
					t.Fatalf("Extra does not survive JSON: %v", err)
				}
				gotExtra = string(b)
			}
			if gotExtra != w.extra {
				t.Errorf("Extra = %s, want %s", gotExtra, w.extra)
			}
			if w.content != "" && d.Content != w.content {
				t.Errorf("Content = %q, want %q", d.Content, w.content)
			}
		})
	}
}

func TestParseDocumentNotesProblemsThatKeepTheFile(t *testing.T) {
	_, notes, err := parseDocument("a.md", []byte("---\nupdated: soon\nrelated: [../x.md, ok.md]\n---\n"), mtime, "kb", DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 2 || !strings.Contains(notes[0], "updated") && !strings.Contains(notes[1], "updated") {
		t.Errorf("notes = %q, want one for updated and one for the dropped related path", notes)
	}
}

func TestDefaultImportanceComesFromConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DefaultImportance = 20
	d, _, err := parseDocument("a.md", []byte("body"), mtime, "kb", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.Importance != 20 {
		t.Errorf("Importance = %v, want the configured default 20", d.Importance)
	}
}

func TestFirstHeading(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"the first level-one heading", "intro\n# Title\n# Second\n", "Title"},
		{"level-two headings are not titles", "## Sub\n# Title\n", "Title"},
		{"a shell comment in a backtick fence is not a title", "```sh\n# comment\n```\n# Title\n", "Title"},
		{"a comment in a tilde fence is not a title", "~~~\n# comment\n~~~\n# Title\n", "Title"},
		{"an unclosed fence hides the rest", "```\n# comment\n", ""},
		{"indented code is not a title", "    # code\n# Title\n", "Title"},
		{"up to three spaces of indent are a heading", "   # Title\n", "Title"},
		{"a closing sequence is dropped", "# Title ###\n", "Title"},
		{"a # glued to a word is kept", "# C#\n", "C#"},
		{"an empty heading is skipped", "# \n# Title\n", "Title"},
		{"a hashtag is not a heading", "#tag\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstHeading(tt.in); got != tt.want {
				t.Errorf("firstHeading(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseMaturity(t *testing.T) {
	for _, m := range []Maturity{Draft, Validated, Core} {
		got, ok := ParseMaturity(m.String())
		if !ok || got != m {
			t.Errorf("ParseMaturity(%q) = %v, %v; want %v", m.String(), got, ok, m)
		}
	}
	if _, ok := ParseMaturity("gold"); ok {
		t.Error(`ParseMaturity("gold") accepted`)
	}
}

// FuzzParseFrontMatter feeds whole files to the document parser: it must never panic,
// and whatever it accepts must satisfy the Document invariants the rest of the service
// relies on.
func FuzzParseFrontMatter(f *testing.F) {
	f.Add([]byte("---\ntitle: x\ntags: [a]\nimportance: 70\nmaturity: core\n---\n# h\nbody"))
	f.Add([]byte("---\na: &a [1]\nb: [*a, *a]\n---\n"))
	cfg := DefaultConfig()
	cfg.MaxFrontMatterBytes = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		d, _, err := parseDocument("dir/f.md", data, mtime, "kb", cfg)
		if err != nil {
			return
		}
		if math.IsNaN(d.Importance) || d.Importance < 0 || d.Importance > 100 {
			t.Fatalf("importance %v out of range", d.Importance)
		}
		if d.Maturity < Draft || d.Maturity > Core {
			t.Fatalf("maturity %d out of range", d.Maturity)
		}
		if d.Title == "" || strings.IndexFunc(d.Title, func(r rune) bool { return unicode.IsControl(r) || r == '\n' }) >= 0 {
			t.Fatalf("title %q is empty or not one line", d.Title)
		}
		for _, r := range d.Related {
			if c, err := CleanPath(r); err != nil || c != r || c == "" {
				t.Fatalf("related %q is not a clean tree path: %v", r, err)
			}
		}
		if !utf8.ValidString(d.Content) || strings.ContainsRune(d.Content, 0) {
			t.Fatalf("content is not clean UTF-8")
		}
		if _, err := json.Marshal(d.Extra); err != nil {
			t.Fatalf("extra does not survive JSON: %v", err)
		}
	})
}
