package devset

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/text"
)

// Two packages can document a symbol in the same words (math/rand and math/rand/v2:
// "A Zipf generates Zipf distributed variates"), and the generator then asked one
// question twice with two expectations. quarry eval asks both on one system: the
// second is an exact-cache hit on the first's answer, so one of the two was always
// scored a wrong direct answer. One question, every document that answers it.
func TestMergeKnownItems(t *testing.T) {
	in := []Question{
		{Kind: "known_item", Query: "rand A Zipf generates Zipf distributed variates", Expect: []string{"math/rand.md"}},
		{Kind: "known_item", Query: "Which gzip function reads a header?", Expect: []string{"compress/gzip.md"}},
		{Kind: "known_item", Query: "rand a zipf generates  Zipf distributed variates", Expect: []string{"math/rand/v2.md"}},
		{Kind: "known_item", Query: "Which gzip function reads a header?", Expect: []string{"compress/gzip.md", "compress/_index.md"}},
	}
	got := mergeKnownItems(in)
	want := []Question{
		{Kind: "known_item", Query: "rand A Zipf generates Zipf distributed variates", Expect: []string{"math/rand.md", "math/rand/v2.md"}},
		{Kind: "known_item", Query: "Which gzip function reads a header?", Expect: []string{"compress/gzip.md", "compress/_index.md"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d questions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Query != want[i].Query || !slices.Equal(got[i].Expect, want[i].Expect) {
			t.Errorf("question %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(in[0].Expect) != 1 {
		t.Errorf("the input's expect was changed: %v", in[0].Expect)
	}
}

// The set Generate writes asks no known-item or out-of-domain question twice.
func TestGenerateAsksEachQuestionOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the Go distribution's documentation")
	}
	out := t.TempDir()
	st, err := Generate(out, Options{GOROOT: goroot(t), Seed: 1, Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "questions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	known := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var q Question
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatal(err)
		}
		if q.Kind == "pair" {
			continue
		}
		if q.Kind == "known_item" {
			known++
		}
		n := text.Normalise(q.Query)
		if seen[n] {
			t.Errorf("%q is asked twice", q.Query)
		}
		seen[n] = true
	}
	if known != st.Known {
		t.Errorf("wrote %d known items, Stats says %d", known, st.Known)
	}
	// And the same set again.
	again := t.TempDir()
	if _, err := Generate(again, Options{GOROOT: goroot(t), Seed: 1, Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"questions.jsonl", "gostd/os/os.md", "gostd/encoding/json.md", "gostd/net/http.md"} {
		a, errA := os.ReadFile(filepath.Join(out, f))
		b, errB := os.ReadFile(filepath.Join(again, f))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s differs between two runs with the same seed (%v, %v)", f, errA, errB)
		}
	}
}

// A package documents some functions in one file per platform (os.Pipe in
// pipe_unix.go, pipe_windows.go, ...). go/doc keeps the first one it reads, and reads
// functions in map order: the KB's text, and with it every question drawn after, came
// out different on each run ("deterministic for a seed and Go release", README said).
func TestLoadPackageIsDeterministic(t *testing.T) {
	src := filepath.Join(goroot(t), "src")
	for _, pkg := range []string{"os", "encoding/json", "net/http", "syscall/js"} {
		first, err := loadPackage(filepath.Join(src, filepath.FromSlash(pkg)), pkg)
		if err != nil || first == nil {
			t.Fatalf("%s: %v, %v", pkg, first, err)
		}
		for range 8 {
			p, err := loadPackage(filepath.Join(src, filepath.FromSlash(pkg)), pkg)
			if err != nil {
				t.Fatal(err)
			}
			if p.Markdown != first.Markdown || !slices.Equal(p.Sentences, first.Sentences) {
				t.Fatalf("%s: loaded twice, documented differently", pkg)
			}
		}
	}
}

func goroot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out))
}
