package meili_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// The engine.Writer contract: "an error means the backend may hold some of them (the
// caller undoes them by applying the inverse)" — which kb does after every failed write.
// A failed task leaves the server unchanged; after the inverse is applied the index's
// bookkeeping (document count and known words) must equal what the server holds.
func TestAFailedApplyUndoneKeepsTheCounts(t *testing.T) {
	srv := meilitest.New(t, key)
	docs := enginetest.Docs()
	ix := open(t, srv.URL, key, "kb", docs)
	defer ix.Close()
	ctx := context.Background()

	// "vault" is in exactly one document (ops/vault.md): a known word, sent quoted.
	added := engine.Doc{Path: "x/vault-audit.md", Folder: "x", Title: "Vault audit", Content: "Audit devices."}
	changes := []engine.Change{{New: &added}}
	srv.FailNextTasks(1, "no space left on device")
	if err := ix.Apply(ctx, changes); !errors.Is(err, meili.ErrTaskFailed) {
		t.Fatalf("Apply = %v, want ErrTaskFailed", err)
	}
	// What kb.Registry.apply does next: undo with the inverse.
	if err := ix.Apply(ctx, engine.Inverse(changes)); err != nil {
		t.Fatalf("inverse Apply: %v", err)
	}
	if got, want := len(srv.Documents("quarry_kb")), len(docs); got != want {
		t.Fatalf("server holds %d documents, want %d", got, want)
	}
	if ix.Len() != len(docs) {
		t.Errorf("Len() = %d after a failed write and its undo, want %d (the server holds %d)", ix.Len(), len(docs), len(docs))
	}

	if _, err := ix.Search(ctx, engine.Query{Terms: []string{"vault"}, AllTerms: true}); err != nil {
		t.Fatal(err)
	}
	rs := srv.Requests()
	var req struct {
		Q string `json:"q"`
	}
	_ = json.Unmarshal(rs[len(rs)-1].Body, &req)
	if req.Q != `"vault"` {
		t.Errorf("search for a word ops/vault.md holds sent q=%s, want %q: the index forgot the word is known", req.Q, `"vault"`)
	}
}
