package meili_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/quarry-router/quarry/services/search/answer"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

const key = "test-key"

func TestOpenAppliesSettingsOnceAndSendsOnlyChangedDocuments(t *testing.T) {
	srv := meilitest.New(t, key)
	docs := enginetest.Docs()
	ix := open(t, srv.URL, key, "kb", docs)
	_ = ix.Close()

	settings, adds := "/indexes/quarry_kb/settings", "/indexes/quarry_kb/documents"
	if n := srv.Count("PATCH", settings); n != 1 {
		t.Fatalf("first start sent the settings %d times, want 1", n)
	}
	if n := srv.Count("POST", adds); n != 1 {
		t.Fatalf("first start sent documents %d times, want 1", n)
	}

	// A restart with the same documents changes nothing.
	ix = open(t, srv.URL, key, "kb", docs)
	_ = ix.Close()
	if n := srv.Count("PATCH", settings); n != 1 {
		t.Errorf("a restart re-sent the settings (%d PATCHes), which re-indexes everything", n)
	}
	if n := srv.Count("POST", adds); n != 1 {
		t.Errorf("a restart re-sent unchanged documents (%d adds)", n)
	}

	// A restart with one document changed and one gone sends that one and deletes the other.
	changed := slices.Clone(docs[:len(docs)-1])
	changed[0].Content += " Rotation is automated."
	before := len(srv.Requests())
	ix = open(t, srv.URL, key, "kb", changed)
	defer ix.Close()
	var sent []map[string]any
	deleted := 0
	for _, r := range srv.Requests()[before:] {
		switch r.Path {
		case adds:
			var batch []map[string]any
			if err := json.Unmarshal(r.Body, &batch); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, batch...)
		case adds + "/delete-batch":
			var ids []string
			_ = json.Unmarshal(r.Body, &ids)
			deleted += len(ids)
		}
	}
	if len(sent) != 1 || sent[0]["path"] != docs[0].Path {
		t.Errorf("restart after one change sent %d documents, want only %s", len(sent), docs[0].Path)
	}
	if deleted != 1 {
		t.Errorf("restart deleted %d documents, want 1", deleted)
	}
	if got := len(srv.Documents("quarry_kb")); got != len(changed) || ix.Len() != len(changed) {
		t.Errorf("index holds %d documents (Len %d), want %d", got, ix.Len(), len(changed))
	}
}

func TestSettingsExpressTheEmbeddedEngine(t *testing.T) {
	srv := meilitest.New(t, key)
	ix := open(t, srv.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	st := srv.Settings("quarry_kb")
	str := func(v any) []string {
		var out []string
		for _, x := range v.([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	if got := str(st["searchableAttributes"]); !slices.Equal(got, []string{"title", "path_text", "content"}) {
		t.Errorf("searchable attributes = %v, want title > path > content (SPEC's boosts)", got)
	}
	filterable := str(st["filterableAttributes"])
	// Scopes compare folder keys, not folder names (see TestAScopeFindsItsOwnFolderOnly).
	for _, f := range []string{"archived", "domain", "folder_keys"} {
		if !slices.Contains(filterable, f) {
			t.Errorf("filterable attributes %v lack %s", filterable, f)
		}
	}
	if stop := str(st["stopWords"]); len(stop) != 0 {
		t.Errorf("stop words = %v, want none: the analysis removes them before stemming, and the stem of %q is %q", stop, "owned", "own")
	}
	typo := st["typoTolerance"].(map[string]any)
	if got := str(typo["disableOnAttributes"]); !slices.Equal(got, []string{"path_text"}) {
		t.Errorf("typo tolerance disabled on %v, want the path words only", got)
	}
}

func TestDocumentsCarryFiltersAndAnalysedText(t *testing.T) {
	srv := meilitest.New(t, key)
	ix := open(t, srv.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	byPath := map[string]map[string]any{}
	for _, d := range srv.Documents("quarry_kb") {
		byPath[d["path"].(string)] = d
	}
	stub := byPath["ops/_archived/pagerduty.stub.md"]
	if stub["archived"] != true || stub["domain"] != "ops" {
		t.Errorf("stub document = %v, want archived and domain ops", stub)
	}
	rot := byPath["auth/jwt/signing-key-rotation.md"]
	if got := rot["title"]; got != "rotat jwt sign key" {
		t.Errorf("title sent as %q, want the stems without stop words", got)
	}
	if got := rot["folders"]; !slices.Equal(toStrings(got), []string{"auth", "auth/jwt"}) {
		t.Errorf("folders = %v, want the folder and its ancestors", got)
	}
	if id := rot["id"].(string); strings.ContainsAny(id, "/.") || len(id) > 511 {
		t.Errorf("id %q is not a valid Meilisearch id", id)
	}
}

func TestSearchRequests(t *testing.T) {
	srv := meilitest.New(t, key)
	ix := open(t, srv.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	ctx := context.Background()

	type req struct {
		Q        string `json:"q"`
		Strategy string `json:"matchingStrategy"`
		Filter   string `json:"filter"`
		Score    bool   `json:"showRankingScore"`
	}
	last := func(t *testing.T, path string) []req {
		t.Helper()
		rs := srv.Requests()
		r := rs[len(rs)-1]
		if r.Path != path {
			t.Fatalf("last request went to %s, want %s", r.Path, path)
		}
		if path == "/multi-search" {
			var m struct{ Queries []req }
			if err := json.Unmarshal(r.Body, &m); err != nil {
				t.Fatal(err)
			}
			return m.Queries
		}
		var one req
		if err := json.Unmarshal(r.Body, &one); err != nil {
			t.Fatal(err)
		}
		return []req{one}
	}

	if _, err := ix.Search(ctx, engine.Query{Terms: []string{"Rotating", "pgbouncr"}, Scope: "auth", AllTerms: true}); err != nil {
		t.Fatal(err)
	}
	got := last(t, "/indexes/quarry_kb/search")
	authKey := sha256.Sum256([]byte("auth"))
	want := req{Q: `"rotat" pgbouncr`, Strategy: "all", Filter: `folder_keys = "` + hex.EncodeToString(authKey[:]) + `"`, Score: true}
	if got[0] != want {
		t.Errorf("all-terms search sent %+v, want %+v (known stems quoted, unknown bare and last)", got[0], want)
	}

	if _, err := ix.Search(ctx, engine.Query{Terms: []string{"vault", "pgbouncer"}}); err != nil {
		t.Fatal(err)
	}
	got = last(t, "/multi-search")
	wantAny := []req{
		{Q: `"vault" "pgbouncer"`, Strategy: "last", Score: true},
		{Q: `"vault"`, Strategy: "all", Score: true},
		{Q: `"pgbouncer"`, Strategy: "all", Score: true},
	}
	if !slices.Equal(got, wantAny) {
		t.Errorf("any-term search sent %+v, want %+v", got, wantAny)
	}
}

func TestAFailedTaskFailsTheWriteAndChangesNothing(t *testing.T) {
	srv := meilitest.New(t, key)
	ix := open(t, srv.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	ctx := context.Background()
	srv.FailNextTasks(1, "no space left on device")
	added := engine.Doc{Path: "x/kafka.md", Folder: "x", Title: "Kafka", Content: "Kafka consumers."}
	err := ix.Apply(ctx, []engine.Change{{New: &added}})
	if !errors.Is(err, meili.ErrTaskFailed) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Apply = %v, want ErrTaskFailed with Meilisearch's message", err)
	}
	if hits, _ := ix.Search(ctx, engine.Query{Terms: []string{"kafka"}}); len(hits) != 0 {
		t.Errorf("a failed write is searchable: %v", hits)
	}
	// The counts are the caller's to set right: it undoes a failed write with the
	// inverse changes (engine.Writer), which TestAFailedApplyUndoneKeepsTheCounts checks.
	if err := ix.Apply(ctx, engine.Inverse([]engine.Change{{New: &added}})); err != nil {
		t.Fatal(err)
	}
	if ix.Len() != len(enginetest.Docs()) {
		t.Errorf("Len() = %d after a failed write and its undo, want %d", ix.Len(), len(enginetest.Docs()))
	}
}

// Writes are retried, a bounded number of times, only when Meilisearch could not be
// reached or asked to be called later; a failed task is Meilisearch's answer and is
// reported at once. A search is sent once more at most
// (TestASearchIsRetriedOnceWhenItsConnectionFails), never with the writes' backoff.
func TestWritesRetryOnlyAnUnreachableServer(t *testing.T) {
	added := engine.Doc{Path: "x/kafka.md", Folder: "x", Title: "Kafka", Content: "Kafka consumers."}
	adds := "/indexes/quarry_kb/documents"
	tests := []struct {
		name      string
		fail      func(*meilitest.Server)
		wantPosts int // add requests for one Apply, with Retries = 2
	}{
		{"503 is retried, then reported", func(s *meilitest.Server) { s.Down(meilitest.Unavailable) }, 3},
		{"a failed task is reported at once", func(s *meilitest.Server) { s.FailNextTasks(1, "no space left on device") }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := meilitest.New(t, key)
			cfg := testConfig(srv.URL, key)
			cfg.Retries, cfg.RetryBackoff = 2, time.Millisecond
			ix, err := meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			before := srv.Count("POST", adds)
			tt.fail(srv)
			if err := ix.Apply(context.Background(), []engine.Change{{New: &added}}); err == nil {
				t.Fatal("Apply succeeded against a failing server")
			}
			if n := srv.Count("POST", adds) - before; n != tt.wantPosts {
				t.Errorf("Apply sent the documents %d times, want %d", n, tt.wantPosts)
			}
			srv.Up()
			if err := ix.Apply(context.Background(), []engine.Change{{New: &added}}); err != nil {
				t.Fatalf("Apply once the server is back: %v", err)
			}
			searches := srv.Count("POST", "/indexes/quarry_kb/search")
			srv.Down(meilitest.Unavailable)
			if _, err := ix.Search(context.Background(), engine.Query{Terms: []string{"kafka"}}); err == nil {
				t.Fatal("Search succeeded against a failing server")
			}
			if n := srv.Count("POST", "/indexes/quarry_kb/search") - searches; n != 2 {
				t.Errorf("a failing search was sent %d times, want 2 (one retry, not -meili-retries)", n)
			}
		})
	}
}

// A write whose server went away (connections cut, then refused) goes through once the
// server is back within the retries.
func TestAWriteRetriesUntilTheServerIsBack(t *testing.T) {
	srv := meilitest.New(t, key)
	cfg := testConfig(srv.URL, key)
	cfg.Retries, cfg.RetryBackoff = 6, 20*time.Millisecond
	ix, err := meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	adds := "/indexes/quarry_kb/documents"
	before := srv.Count("POST", adds)
	srv.Down(meilitest.Refused)
	added := engine.Doc{Path: "x/kafka.md", Folder: "x", Title: "Kafka", Content: "Kafka consumers."}
	res := make(chan error, 1)
	go func() { res <- ix.Apply(context.Background(), []engine.Change{{New: &added}}) }()
	// The first attempt reaches the server on a connection opened before the outage,
	// which cuts it; the retries are refused until Up.
	deadline := time.Now().Add(10 * time.Second)
	for srv.Count("POST", adds) == before {
		if time.Now().After(deadline) {
			t.Fatal("the write never reached the server")
		}
		time.Sleep(time.Millisecond)
	}
	srv.Up()
	if err := <-res; err != nil {
		t.Fatalf("Apply across an outage: %v", err)
	}
	if hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"kafka"}}); err != nil || len(hits) != 1 {
		t.Errorf("after the retried write, search = %v, %v", hits, err)
	}
}

// Asked for passages, a search returns each hit's crop from Meilisearch: at most the
// words asked for, around the query's words, which the answer package finds again in
// the file's own text. Without the question, hits carry none.
func TestSearchReturnsMeilisearchsCropAsThePassage(t *testing.T) {
	srv := meilitest.New(t, key)
	filler := strings.Repeat("Dashboards list the error budget of every service in the fleet. ", 12)
	long := engine.Doc{Path: "auth/jwt/long.md", Folder: "auth/jwt", Title: "Key handling",
		Content: filler + "Rotate the signing key every ninety days and publish it first. " + filler}
	ix := open(t, srv.URL, key, "kb", append(enginetest.Docs(), long))
	defer ix.Close()
	ctx := context.Background()
	for _, all := range []bool{true, false} {
		hits, err := ix.Search(ctx, engine.Query{Terms: []string{"rotate", "signing", "ninety"}, AllTerms: all, Passage: 8})
		if err != nil {
			t.Fatal(err)
		}
		var passage string
		for _, h := range hits {
			if h.Path == long.Path {
				passage = h.Passage
			}
		}
		words := strings.Fields(passage)
		if len(words) == 0 || len(words) > 8 {
			t.Fatalf("all terms %v: passage %q, want 1-8 words", all, passage)
		}
		for _, stem := range []string{"rotat", "sign", "nineti"} {
			if !slices.Contains(words, stem) {
				t.Errorf("all terms %v: passage %q lacks %q", all, passage, stem)
			}
		}
		excerpt, ok := answer.DefaultConfig().ExcerptAround(long.Content, passage)
		if !ok || !strings.Contains(excerpt, "Rotate the signing key every ninety days") {
			t.Errorf("all terms %v: the passage's excerpt is %q (found %v)", all, excerpt, ok)
		}
	}
	var req struct {
		AttributesToCrop []string `json:"attributesToCrop"`
		CropLength       int      `json:"cropLength"`
		CropMarker       string   `json:"cropMarker"`
	}
	for _, r := range srv.Requests() {
		if r.Path == "/indexes/quarry_kb/search" {
			_ = json.Unmarshal(r.Body, &req)
		}
	}
	if !slices.Equal(req.AttributesToCrop, []string{"content"}) || req.CropLength != 8 || req.CropMarker != "…" {
		t.Errorf("the all-terms search asked for crop %+v, want content, 8 words, marker …", req)
	}
	hits, err := ix.Search(ctx, engine.Query{Terms: []string{"rotate"}, AllTerms: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if h.Passage != "" {
			t.Errorf("a search without Passage returned one for %s: %q", h.Path, h.Passage)
		}
	}
}

// A write that lost the server after its documents were accepted leaves a task that
// Meilisearch may still apply. The next Open of the index waits for it before comparing
// documents, so what it makes equal to the knowledge base stays equal.
func TestOpenWaitsForATaskAnInterruptedWriteLeft(t *testing.T) {
	srv := meilitest.New(t, key)
	cfg := testConfig(srv.URL, key)
	cfg.Retries, cfg.RetryBackoff = 1, time.Millisecond
	docs := enginetest.Docs()
	ix, err := meili.Open(context.Background(), cfg, "kb", docs)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	srv.DownAfterRequests(1, meilitest.Refused) // the documents are accepted, then nothing
	added := engine.Doc{Path: "x/kafka.md", Folder: "x", Title: "Kafka", Content: "Kafka consumers."}
	if err := ix.Apply(context.Background(), []engine.Change{{New: &added}}); err == nil {
		t.Fatal("Apply succeeded without seeing its task")
	}
	srv.Up()
	// The knowledge base never got the file (its write failed): Open makes the index
	// equal to it again.
	again, err := meili.Open(context.Background(), cfg, "kb", docs)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	// Any later write runs the server's queue to its end.
	moved := engine.Doc{Path: "x/zookeeper.md", Folder: "x", Title: "Zookeeper", Content: "Quorum of five."}
	if err := again.Apply(context.Background(), []engine.Change{{New: &moved}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range srv.Documents("quarry_kb") {
		if d["path"] == added.Path {
			t.Errorf("the interrupted write's document is in the index after Open made it equal to the knowledge base")
		}
	}
}

// A write whose documents Meilisearch accepted, but whose answer (the task's uid) was
// lost as the server went away, leaves a task no one knows of. The next Open compared the
// documents before Meilisearch had applied it, so it kept a document of a write that had
// failed and been reported: a search hit for a file the knowledge base does not hold.
// Open waits for every task Meilisearch still has queued for the index first.
func TestOpenWaitsForATaskWhoseAnswerWasLost(t *testing.T) {
	srv := meilitest.New(t, key)
	cfg := testConfig(srv.URL, key)
	cfg.Retries, cfg.RetryBackoff = 1, time.Millisecond
	docs := enginetest.Docs()
	ix, err := meili.Open(context.Background(), cfg, "kb", docs)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	srv.DropAnswerThenDown(meilitest.Refused) // the documents are accepted, the answer lost
	added := engine.Doc{Path: "x/kafka.md", Folder: "x", Title: "Kafka", Content: "Kafka consumers."}
	if err := ix.Apply(context.Background(), []engine.Change{{New: &added}}); err == nil {
		t.Fatal("Apply succeeded without an answer")
	}
	srv.Up()
	again, err := meili.Open(context.Background(), cfg, "kb", docs)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	// Any later write runs the server's queue to its end.
	moved := engine.Doc{Path: "x/zookeeper.md", Folder: "x", Title: "Zookeeper", Content: "Quorum of five."}
	if err := again.Apply(context.Background(), []engine.Change{{New: &moved}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range srv.Documents("quarry_kb") {
		if d["path"] == added.Path {
			t.Errorf("the document of a write whose answer was lost is in the index after Open made it equal to the knowledge base")
		}
	}
	if hits, err := again.Search(context.Background(), engine.Query{Terms: []string{"kafka"}}); err != nil || len(hits) != 0 {
		t.Errorf("search for the failed write's word = %v, %v; want nothing", hits, err)
	}
}

func TestOpenRefusesAWrongKey(t *testing.T) {
	srv := meilitest.New(t, key)
	_, err := meili.Open(context.Background(), testConfig(srv.URL, "wrong"), "kb", enginetest.Docs())
	if err == nil || !strings.Contains(err.Error(), "invalid_api_key") {
		t.Errorf("Open with a wrong key = %v, want invalid_api_key", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*meili.Config)
		want string
	}{
		{"a URL is required", func(c *meili.Config) { c.URL = "" }, "-meili-url is required"},
		{"the URL is http(s)", func(c *meili.Config) { c.URL = "ftp://x" }, "-meili-url must be"},
		{"the prefix is index-safe", func(c *meili.Config) { c.IndexPrefix = "a/b" }, "-meili-index-prefix"},
		{"typo sizes are ordered", func(c *meili.Config) { c.OneTypo, c.TwoTypos = 9, 5 }, "-meili-one-typo"},
		{"the defaults are valid", func(*meili.Config) {}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig("http://127.0.0.1:7700", "")
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// An index of the same name that another tool created with another primary key is
// refused at Open, saying so, rather than failing at the first write with a task error
// about documents.
func TestOpenRefusesAnIndexWithAnotherPrimaryKey(t *testing.T) {
	srv := meilitest.New(t, key)
	cfg := testConfig(srv.URL, key)
	c := meilisearch.New(srv.URL, meilisearch.WithAPIKey(key))
	defer c.Close()
	task, err := c.CreateIndex(&meilisearch.IndexConfig{Uid: cfg.IndexUID("kb"), PrimaryKey: "doc_id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForTask(task.TaskUID, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err = meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
	if err == nil || !strings.Contains(err.Error(), "primary key") || !strings.Contains(err.Error(), "doc_id") {
		t.Fatalf("Open over an index keyed by doc_id = %v, want an error naming the primary key", err)
	}
	if n := srv.Count("POST", "/indexes/"+cfg.IndexUID("kb")+"/documents"); n != 0 {
		t.Errorf("%d document writes sent to the foreign index, want none", n)
	}
}
