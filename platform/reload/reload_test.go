package reload

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// number parses the file at path as an integer, the value under test.
func number(path string) func() (int, error) {
	return func() (int, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(b))
	}
}

// replace puts a new file in place of path, as the kubelet and cert-manager do, keeping
// its modification time: only the file's identity tells the versions apart.
func replace(t *testing.T, path, body string, mod time.Time) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mod, mod); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestAValueFollowsItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n")
	mod := time.Now().Add(-time.Hour).Truncate(time.Second)
	replace(t, path, "1", mod)
	v, err := New(number(path), path)
	if err != nil {
		t.Fatal(err)
	}
	var changes []error
	v.OnChange = func(err error) { changes = append(changes, err) }

	steps := []struct {
		name    string
		body    string // "" removes the file, "=" leaves it
		later   time.Duration
		want    int
		changes int  // OnChange calls so far
		failed  bool // the last of them with an error
	}{
		{"unchanged", "=", 0, 1, 0, false},
		// The modification time's clock ticks every few milliseconds: a file replaced
		// within one tick by another of the same size is told apart by its identity.
		{"another file of the same size and time", "2", 0, 2, 1, false},
		{"a file that does not parse keeps the value", "x", time.Second, 2, 2, true},
		{"and is told once", "=", 0, 2, 2, true},
		{"another that does not parse is told too", "y", 2 * time.Second, 2, 3, true},
		{"a removed file keeps the value", "", 0, 2, 4, true},
		{"the next good file is read", "3", 3 * time.Second, 3, 5, false},
	}
	for _, st := range steps {
		switch st.body {
		case "=":
		case "":
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		default:
			replace(t, path, st.body, mod.Add(st.later))
		}
		for range 2 {
			if got := v.Get(); got != st.want {
				t.Fatalf("%s: Get = %d, want %d", st.name, got, st.want)
			}
		}
		if len(changes) != st.changes {
			t.Fatalf("%s: OnChange called %d times, want %d (%v)", st.name, len(changes), st.changes, changes)
		}
		if n := len(changes); n > 0 && (changes[n-1] != nil) != st.failed {
			t.Errorf("%s: OnChange(%v), want an error: %v", st.name, changes[n-1], st.failed)
		}
	}
}

func TestEveryBoundsHowOftenFilesAreLookedAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n")
	if err := os.WriteFile(path, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := New(number(path), path)
	if err != nil {
		t.Fatal(err)
	}
	v.Every = time.Hour
	v.Get() // looks now, and not again for an hour
	replace(t, path, "2", time.Now())
	if got := v.Get(); got != 1 {
		t.Errorf("Get = %d within Every of the last look, want the value read before, 1", got)
	}
	v.next.Store(0) // an hour later
	if got := v.Get(); got != 2 {
		t.Errorf("Get = %d after Every, want 2", got)
	}
}

func TestNewFailsWithParsesError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing")
	if _, err := New(number(path), path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New = %v, want the parse's not-exist error", err)
	}
}
