package kbgen

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// readTree returns every file under dir keyed by its slash path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func generate(t *testing.T, opt Options) (*Manifest, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	m, err := Generate(dir, opt)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", opt, err)
	}
	return m, readTree(t, dir)
}

// splitFrontMatter returns the front matter and body, or ok=false when the file does not
// open with "---\n" and close the block with a "---" line.
func splitFrontMatter(b []byte) (fm, body string, ok bool) {
	s := string(b)
	if !strings.HasPrefix(s, "---\n") {
		return "", "", false
	}
	end := strings.Index(s[4:], "\n---\n")
	if end < 0 {
		return "", "", false
	}
	return s[4 : 4+end+1], s[4+end+5:], true
}

func fmKeys(fm string) map[string]string {
	keys := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(fm), "\n") {
		k, v, _ := strings.Cut(line, ":")
		keys[k] = strings.TrimSpace(v)
	}
	return keys
}

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
}

func isKnowledge(p string) bool {
	return !strings.HasSuffix(p, "/_index.md") && !strings.Contains(p, "/_archived/")
}

func TestGenerateWritesExactlyFilesAndListsThemInTheManifest(t *testing.T) {
	m, files := generate(t, Options{Files: 300, Seed: 1})
	if len(files) != 300 || len(m.Files) != 300 {
		t.Fatalf("files on disk %d, in manifest %d; want 300 each", len(files), len(m.Files))
	}
	if !slices.IsSortedFunc(m.Files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("manifest not sorted by path")
	}
	domainsSeen, stubs := map[string]bool{}, 0
	for _, f := range m.Files {
		if _, ok := files[f.Path]; !ok {
			t.Errorf("manifest lists %s, not on disk", f.Path)
		}
		domainsSeen[strings.Split(f.Path, "/")[0]] = true
		if strings.Contains(f.Path, "/_archived/") {
			stubs++
			if !strings.HasSuffix(f.Path, ".stub.md") {
				t.Errorf("archived file %s is not a .stub.md", f.Path)
			}
		}
	}
	if len(domainsSeen) != 8 {
		t.Errorf("default Domains gave %d top-level folders, want 8", len(domainsSeen))
	}
	if stubs == 0 {
		t.Error("no _archived stubs generated")
	}
}

func TestEveryDomainAndTopicFolderHasAnIndex(t *testing.T) {
	_, files := generate(t, Options{Files: 300, Seed: 2})
	for p := range files {
		dir := filepath.ToSlash(filepath.Dir(p))
		if strings.HasSuffix(dir, "/_archived") {
			continue
		}
		for d := dir; d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			if _, ok := files[d+"/_index.md"]; !ok {
				t.Fatalf("folder %s has no _index.md", d)
			}
		}
	}
}

func TestFrontMatterIsDelimitedAndComplete(t *testing.T) {
	_, files := generate(t, Options{Files: 300, Seed: 3})
	want := []string{"title", "tags", "related", "importance", "maturity", "updated"}
	for p, b := range files {
		fm, _, ok := splitFrontMatter(b)
		if !ok {
			t.Fatalf("%s: front matter not delimited by ---", p)
		}
		keys := fmKeys(fm)
		if keys["title"] == "" {
			t.Errorf("%s: no title", p)
		}
		if !isKnowledge(p) {
			continue
		}
		for _, k := range want {
			if _, ok := keys[k]; !ok {
				t.Errorf("%s: front matter lacks %q", p, k)
			}
		}
		if _, err := time.Parse(time.DateOnly, keys["updated"]); err != nil {
			t.Errorf("%s: updated %q: %v", p, keys["updated"], err)
		}
		related := strings.Trim(keys["related"], "[]")
		for _, r := range strings.Split(related, ", ") {
			if _, ok := files[r]; r != "" && !ok {
				t.Errorf("%s: related %q does not exist", p, r)
			}
		}
	}
}

func TestKnowledgeFilesHaveShortTitlesAndBodiesOfRealisticLength(t *testing.T) {
	m, files := generate(t, Options{Files: 300, Seed: 4})
	for _, f := range m.Files {
		if !isKnowledge(f.Path) {
			continue
		}
		if n := len(strings.Fields(f.Title)); n < 3 || n > 6 {
			t.Errorf("%s: title %q has %d words, want 3–6", f.Path, f.Title, n)
		}
		_, body, _ := splitFrontMatter(files[f.Path])
		if n := len(strings.Fields(body)); n < 150 || n > 800 {
			t.Errorf("%s: body has %d words, want about 150–800", f.Path, n)
		}
	}
}

func TestDistinctiveWordsOccurInTheirFileOnly(t *testing.T) {
	m, files := generate(t, Options{Files: 300, Seed: 5})
	owner := map[string]string{}
	for _, f := range m.Files {
		if !isKnowledge(f.Path) {
			if len(f.Distinctive) != 0 {
				t.Errorf("%s: summary or stub has distinctive words", f.Path)
			}
			continue
		}
		if n := len(f.Distinctive); n < 2 || n > 3 {
			t.Errorf("%s: %d distinctive words, want 2–3", f.Path, n)
		}
		for _, w := range f.Distinctive {
			if prev, dup := owner[w]; dup {
				t.Errorf("distinctive %q given to %s and %s", w, prev, f.Path)
			}
			owner[w] = f.Path
		}
	}
	all := slices.Sorted(maps.Keys(owner))
	for i := 1; i < len(all); i++ {
		if strings.HasPrefix(all[i], all[i-1]) {
			t.Errorf("distinctive %q is a prefix of %q", all[i-1], all[i])
		}
	}
	for p, b := range files {
		// "related" names other files by path, and paths carry their distinctive words.
		var text []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "related:") {
				text = append(text, line)
			}
		}
		count := map[string]int{}
		for _, w := range words(strings.Join(text, "\n")) {
			if _, ok := owner[w]; ok {
				count[w]++
			}
		}
		for w, n := range count {
			if owner[w] != p {
				t.Errorf("%q belongs to %s but occurs in %s", w, owner[w], p)
			}
			if n < 2 {
				t.Errorf("%s: distinctive %q occurs %d times, want >= 2", p, w, n)
			}
		}
		for _, f := range m.Files {
			if f.Path != p {
				continue
			}
			for _, w := range f.Distinctive {
				if count[w] == 0 {
					t.Errorf("%s: distinctive %q missing", p, w)
				}
			}
		}
	}
}

func TestSameSeedGivesIdenticalBytes(t *testing.T) {
	opt := Options{Files: 300, Seed: 42, Domains: 6}
	m1, a := generate(t, opt)
	m2, b := generate(t, opt)
	if len(a) != len(b) {
		t.Fatalf("file counts differ: %d vs %d", len(a), len(b))
	}
	for p, x := range a {
		if !bytes.Equal(x, b[p]) {
			t.Fatalf("%s differs between runs with the same seed", p)
		}
	}
	if !slices.EqualFunc(m1.Files, m2.Files, func(x, y FileInfo) bool {
		return x.Path == y.Path && x.Title == y.Title && slices.Equal(x.Distinctive, y.Distinctive)
	}) {
		t.Error("manifests differ between runs with the same seed")
	}
	if q1, q2 := m1.Questions(50, 9), m2.Questions(50, 9); !slices.Equal(q1, q2) {
		t.Error("questions differ for the same manifest and seed")
	}
}

func TestDifferentSeedGivesADifferentTree(t *testing.T) {
	m1, _ := generate(t, Options{Files: 300, Seed: 1})
	m2, _ := generate(t, Options{Files: 300, Seed: 2})
	if slices.EqualFunc(m1.Files, m2.Files, func(x, y FileInfo) bool { return x.Path == y.Path }) {
		t.Error("seeds 1 and 2 produced the same paths")
	}
}

func TestQuestionsNameTheirFilesDistinctiveWords(t *testing.T) {
	m, files := generate(t, Options{Files: 300, Seed: 6})
	dist := map[string][]string{}
	for _, f := range m.Files {
		dist[f.Path] = f.Distinctive
	}
	qs := m.Questions(100, 1)
	if len(qs) != 100 {
		t.Fatalf("got %d questions, want 100", len(qs))
	}
	seen := map[string]bool{}
	for _, q := range qs {
		if _, ok := files[q.Expect]; !ok || !isKnowledge(q.Expect) {
			t.Errorf("%q expects %s, not a knowledge file", q.Query, q.Expect)
		}
		if seen[q.Expect] {
			t.Errorf("%s expected by two questions", q.Expect)
		}
		seen[q.Expect] = true
		if !slices.ContainsFunc(words(q.Query), func(w string) bool { return slices.Contains(dist[q.Expect], w) }) {
			t.Errorf("%q names none of %s's distinctive words %v", q.Query, q.Expect, dist[q.Expect])
		}
	}
	knowledge := 0
	for _, f := range m.Files {
		if isKnowledge(f.Path) {
			knowledge++
		}
	}
	if got := m.Questions(1_000_000, 1); len(got) != knowledge {
		t.Errorf("asking for more questions than files gave %d, want one per knowledge file (%d)", len(got), knowledge)
	}
}

func TestInvalidOptionsAreRejected(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
	}{
		{"too few files for the domains", Options{Files: 20}},
		{"zero files", Options{}},
		{"more domains than the catalogue", Options{Files: 5000, Domains: MaxDomains() + 1}},
		{"negative domains", Options{Files: 300, Domains: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Generate(dir, tt.opt); !errors.Is(err, ErrOptions) {
				t.Fatalf("err = %v, want ErrOptions", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("rejected options still wrote %d entries", len(entries))
			}
		})
	}
}

func BenchmarkGenerate5000(b *testing.B) {
	for b.Loop() {
		if _, err := Generate(b.TempDir(), Options{Files: 5000, Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteOnlyBaseline writes the same number of files of the same average size with
// fixed content into the same folder shape: the floor the file system sets for Generate.
func BenchmarkWriteOnlyBaseline(b *testing.B) {
	content := bytes.Repeat([]byte("lorem ipsum "), 280) // ~3.3 KB, a generated file's average
	for b.Loop() {
		dir := b.TempDir()
		for i := range 5000 {
			sub := filepath.Join(dir, strconv.Itoa(i%8), strconv.Itoa(i%88))
			if i < 88 {
				if err := os.MkdirAll(sub, 0o755); err != nil {
					b.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(sub, strconv.Itoa(i)+".md"), content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestInventedWordsAreNeitherPoolWordsNorPrefixesOfEachOther(t *testing.T) {
	in := newInventor(shared, topicWords)
	r := newRNG(1, 0)
	var got []string
	for range 20000 { // more than a 5,000-file tree needs
		got = append(got, in.word(r))
	}
	slices.Sort(got)
	for i, w := range got {
		if i > 0 && strings.HasPrefix(w, got[i-1]) {
			t.Fatalf("%q is a prefix of %q", got[i-1], w)
		}
		if slices.ContainsFunc(shared, func(p string) bool { return strings.HasPrefix(w, p) }) {
			t.Fatalf("%q starts with a shared pool word", w)
		}
	}
}
