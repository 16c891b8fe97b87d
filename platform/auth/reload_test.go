package auth

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAKeysFileIsReadAgainWhenItChanges: keys are added and revoked by changing the
// file (a Kubernetes Secret's volume updates in place); each service read it once, so a
// new key was refused and a revoked one kept working until every pod restarted. A file
// changed into one that cannot be used keeps the keys read before.
func TestAKeysFileIsReadAgainWhenItChanges(t *testing.T) {
	lookEvery(t, 10*time.Millisecond)
	path := filepath.Join(t.TempDir(), "keys.json")
	write := func(body string) { t.Helper(); replaceFile(t, path, body) }
	keys := func(ks ...Key) string { t.Helper(); return keysJSON(t, ks...) }
	a := Key{Name: "team-a", SHA256: HashKey(teamA), KnowledgeBases: []string{"platform"}}
	b := Key{Name: "team-b", SHA256: HashKey(teamB), KnowledgeBases: []string{"platform"}}
	write(keys(a))
	p, err := LoadPolicy(path, nil, "/quarry.v1.KnowledgeService/")
	if err != nil {
		t.Fatal(err)
	}
	// eventually waits for the file's next reading to give key want.
	eventually := func(key string, want error) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := p.Authorize(withKey(key), query, "platform")
			if errors.Is(err, want) || err == nil && want == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Authorize(%s) = %v, want %v", key, err, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	eventually(teamA, nil)
	eventually(teamB, ErrUnauthenticated)

	write(keys(b)) // a rotated to b
	eventually(teamB, nil)
	eventually(teamA, ErrUnauthenticated)

	for _, bad := range []string{"[]", "not json", keys(Key{Name: "no-kbs", SHA256: HashKey(teamA)})} {
		write(bad)
		time.Sleep(5 * reloadEvery)
		eventually(teamB, nil)
		eventually(teamA, ErrUnauthenticated)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * reloadEvery)
	eventually(teamB, nil)
	if p.Open() {
		t.Error("a policy read from a file became open")
	}
}

// lookEvery makes the keys file looked at every d for the test.
func lookEvery(t *testing.T, d time.Duration) {
	old := reloadEvery
	reloadEvery = d
	t.Cleanup(func() { reloadEvery = old })
}

// replaceFile puts a new file holding body at path, as the kubelet updates a Secret's
// volume: never one written in place.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// keysJSON is a keys file holding ks.
func keysJSON(t *testing.T, ks ...Key) string {
	t.Helper()
	b, err := json.Marshal(ks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
