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
	old := reloadEvery
	reloadEvery = 10 * time.Millisecond
	t.Cleanup(func() { reloadEvery = old })

	path := filepath.Join(t.TempDir(), "keys.json")
	write := func(body string) {
		t.Helper()
		// As the kubelet does: a new file put in place, never one written in place.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(ks ...Key) string {
		b, err := json.Marshal(ks)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
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
