package kb_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"github.com/quarry-router/quarry/services/search/kb"
)

// A write Meilisearch refuses (a failed task) is undone and reported as ErrEngine; the
// knowledge base must be left exactly as it was: the engine still counts the documents
// the server holds, and words it holds stay known.
func TestAFailedMeilisearchWriteLeavesTheEngineAsItWas(t *testing.T) {
	srv := meilitest.New(t, "key")
	cfg := defaultConfig(t)
	cfg.Engine = kb.EngineMeilisearch
	cfg.Meili.URL, cfg.Meili.Key, cfg.Meili.IndexPrefix = srv.URL, "key", "test_"
	reg := newRegistry(t, cfg)
	k := load(t, reg, "team", writeTree(t, smallTree))
	before := k.Engine.Len()

	srv.FailNextTasks(1, "no space left on device")
	_, err := reg.UpsertFile(context.Background(), "team", "ops/backup-audit.md", []byte("# Backups audit\n\nWho checks the backups.\n"))
	if !errors.Is(err, kb.ErrEngine) {
		t.Fatalf("UpsertFile = %v, want ErrEngine", err)
	}
	k, _ = reg.Get("team")
	if got := len(srv.Documents("test_team")); got != before {
		t.Fatalf("server holds %d documents, want %d", got, before)
	}
	if k.Engine.Len() != before || k.Engine.Len() != k.Tree.Len() {
		t.Errorf("after a refused write: Engine.Len() = %d, tree holds %d, server holds %d", k.Engine.Len(), k.Tree.Len(), before)
	}
	if _, err := k.Engine.Search(context.Background(), engine.Query{Terms: []string{"backups"}, AllTerms: true}); err != nil {
		t.Fatal(err)
	}
	rs := srv.Requests()
	var req struct {
		Q string `json:"q"`
	}
	_ = json.Unmarshal(rs[len(rs)-1].Body, &req)
	if req.Q != `"backup"` {
		t.Errorf("search for a word ops/backups.md holds sent q=%s, want %q (known word searched exactly)", req.Q, `"backup"`)
	}
}
