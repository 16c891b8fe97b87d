// Package meili is the production engine.Backend: one Meilisearch index per knowledge
// base, set up so that it finds what the embedded Bleve engine finds.
//
// Meilisearch does not stem English, so Quarry analyses text itself before it reaches the
// index: documents and queries are sent as the Snowball stems of their words, stop words
// removed, with the same word rules as the embedded engine and the ranking corpus. A query
// word the index contains is sent as a one-word phrase ("rotat"), which Meilisearch
// matches exactly; a word it lacks (a misspelling, a partial word) is sent bare and gets
// typo and prefix matching, as in the embedded engine.
//
// All-terms searches use matchingStrategy "all"; Meilisearch reads only the first ten
// words of a query, so one of more words is asked in parts of ten, and a hit is a
// document every part finds (scored by its mean). Meilisearch has no any-term search
// ("last" drops words from the end, so a document holding only the last word is never
// found), so an any-term search is one multi-search request: the whole query with "last"
// plus each word on its own; a document scores the better of its "last" score and the
// idf-weighted mean of its per-word scores, so matching more words, and rarer ones, ranks
// higher, as in BM25. Scores are
// Meilisearch's _rankingScore, already in [0,1]; the ranker uses them as the engine score.
package meili

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/engine"
)

// ErrTaskFailed means Meilisearch did not apply a write: its task failed or was canceled.
var ErrTaskFailed = errors.New("meilisearch task failed")

// ErrUnavailable is engine.ErrUnavailable: Meilisearch could not answer a search (not
// reached, no upstream behind a proxy, too busy: 429 or its 503
// too_many_search_requests, or no answer within -meili-request-timeout).
var ErrUnavailable = engine.ErrUnavailable

// schemaVersion is part of every document's hash, with text.Version: bump it when the
// analysis or the document shape changes, so the next start re-sends every document.
const schemaVersion = "quarry-meili-4"

// Field names of the documents.
const (
	fieldID       = "id"
	fieldPath     = "path"
	fieldTitle    = "title"
	fieldPathText = "path_text"
	fieldContent  = "content"
	fieldFolders  = "folders"
	// fieldFolderKeys holds folderKey of each of folders: what scope filters compare.
	fieldFolderKeys = "folder_keys"
	fieldDomain     = "domain"
	fieldArchived   = "archived"
	fieldSummary    = "summary"
	fieldHash       = "hash"
	rankingScore    = "_rankingScore"
	formatted       = "_formatted"
)

// document is one knowledge file as the index holds it: analysed text, filters, and the
// hash a start-up compares to skip unchanged documents.
type document struct {
	ID       string   `json:"id"`
	Path     string   `json:"path"`
	Title    string   `json:"title"`
	PathText string   `json:"path_text"`
	Content  string   `json:"content"`
	Folders  []string `json:"folders"`
	// FolderKeys are the folders as folderKey spells them, for the scope filter.
	FolderKeys []string `json:"folder_keys"`
	Domain     string   `json:"domain"`
	Archived   bool     `json:"archived"`
	Summary    bool     `json:"summary"`
	Hash       string   `json:"hash"`
}

// Index is an engine.Backend over one Meilisearch index.
type Index struct {
	client meilisearch.ServiceManager
	index  meilisearch.IndexManager
	uid    string
	cfg    Config

	// writeMu serialises Apply.
	writeMu sync.Mutex
	// mu guards n and vocab, which Apply changes while searches read them.
	mu sync.RWMutex
	n  int
	// vocab counts, per stem, the documents whose title or content holds it: the words
	// the index "knows", which are searched exactly.
	vocab map[string]int
}

var (
	_ engine.Writer        = (*Index)(nil)
	_ engine.MultiSearcher = (*Index)(nil)
	_ engine.Named         = (*Index)(nil)
)

// Open connects to the index of a knowledge base, creating it and applying its settings
// if needed (only settings that differ are sent, so a restart changes nothing), and makes
// its documents equal docs: documents whose hash differs are sent, documents not in docs
// are deleted. It returns once Meilisearch has applied every change.
func Open(ctx context.Context, cfg Config, kbID string, docs []engine.Doc) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("meilisearch config: %w", err)
	}
	// The library's own retries (1 s, 2 s, 3 s on 502/503/504, for every request) are off:
	// writes retry with Config.Retries, which also covers an unreachable server, and a
	// search is sent once more at most, at once (retrySearch).
	client := meilisearch.New(cfg.URL, meilisearch.WithAPIKey(cfg.Key), meilisearch.DisableRetries(),
		meilisearch.WithCustomClient(&http.Client{Timeout: cfg.RequestTimeout, Transport: newTransport()}))
	ix := &Index{client: client, uid: cfg.IndexUID(kbID), cfg: cfg, vocab: map[string]int{}}
	ix.index = client.Index(ix.uid)
	if err := ix.open(ctx, docs); err != nil {
		client.Close()
		return nil, err
	}
	return ix, nil
}

// newTransport is the transport the library gives its own client (its baseTransport),
// for the client Open builds to set a timeout. Without one, http.Client uses
// http.DefaultTransport, which keeps 2 idle connections per host: every search beyond two
// at a time opened a connection and closed it after its answer. It is the Index's own,
// too, so that Close releases this index's connections and not the whole process's.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

func (ix *Index) open(ctx context.Context, docs []engine.Doc) error {
	if err := ix.ensureIndex(ctx); err != nil {
		return err
	}
	// A write whose task could not be followed to its end may still be applied: the
	// documents are compared once it has.
	if err := ix.finishUnsettled(ctx); err != nil {
		return err
	}
	if err := ix.ensureSettings(ctx); err != nil {
		return err
	}
	have, err := ix.storedHashes(ctx)
	if err != nil {
		return err
	}
	memo := text.StemMemo{}
	want := make(map[string]bool, len(docs))
	var send []document
	for _, d := range docs {
		if d.Path == "" {
			return errors.New("meilisearch index: document without a path")
		}
		doc, stems := analyse(d, memo)
		if want[doc.ID] {
			continue
		}
		want[doc.ID] = true
		for _, s := range stems {
			ix.vocab[s]++
		}
		if have[doc.ID] != doc.Hash {
			send = append(send, doc)
		}
	}
	var drop []string
	for id := range have {
		if !want[id] {
			drop = append(drop, id)
		}
	}
	sort.Strings(drop)
	if err := ix.write(ctx, send, drop); err != nil {
		return err
	}
	ix.n = len(want)
	return nil
}

// ensureIndex creates the index unless it exists.
func (ix *Index) ensureIndex(ctx context.Context) error {
	var existing *meilisearch.IndexResult
	err := ix.retry(ctx, func() (err error) {
		existing, err = ix.client.GetIndexWithContext(ctx, ix.uid)
		return err
	})
	if err == nil {
		// An index of this name that another tool made, keyed otherwise, would fail
		// every write with "primary key mismatch": refused here, saying what to do.
		if pk := existing.PrimaryKey; pk != "" && pk != fieldID {
			return fmt.Errorf("meilisearch index %s has primary key %q, not Quarry's %q: another tool's index of the same name? Delete it or choose another -meili-index-prefix", ix.uid, pk, fieldID)
		}
		return nil
	}
	if apiCode(err) != "index_not_found" {
		return fmt.Errorf("meilisearch index %s: %w", ix.uid, err)
	}
	var info *meilisearch.TaskInfo
	err = ix.retry(ctx, func() (err error) {
		info, err = ix.client.CreateIndexWithContext(ctx, &meilisearch.IndexConfig{Uid: ix.uid, PrimaryKey: fieldID})
		return err
	})
	if err != nil {
		return fmt.Errorf("meilisearch create index %s: %w", ix.uid, err)
	}
	if err := ix.wait(ctx, info, "create index"); err != nil {
		// Another replica created it first.
		if strings.Contains(err.Error(), "index_already_exists") {
			return nil
		}
		return err
	}
	return nil
}

// settings returns the index settings Quarry needs: searchable attributes in the order
// of SPEC's boosts (title > path > content, Meilisearch's attribute ranking rule), the
// filters, and typo tolerance that leaves the path words alone. Stop words: see below.
func (ix *Index) settings() *meilisearch.Settings {
	return &meilisearch.Settings{
		RankingRules:         []string{"words", "typo", "proximity", "attribute", "sort", "exactness"},
		SearchableAttributes: []string{fieldTitle, fieldPathText, fieldContent},
		// The content is displayed only so that a search can crop it (a passage); hits
		// retrieve the path alone.
		DisplayedAttributes: []string{fieldID, fieldPath, fieldHash, fieldContent},
		// folders stays filterable beside folder_keys for a release: search replicas of
		// the previous one share the index during a rolling upgrade and scope their
		// searches with `folders = "..."`, which Meilisearch refuses (invalid_search_filter)
		// on an attribute that is not filterable.
		FilterableAttributes: []string{fieldArchived, fieldDomain, fieldFolderKeys, fieldFolders, fieldSummary},
		TypoTolerance: &meilisearch.TypoTolerance{
			Enabled:             true,
			MinWordSizeForTypos: meilisearch.MinWordSizeForTypos{OneTypo: int64(ix.cfg.OneTypo), TwoTypos: int64(ix.cfg.TwoTypos)},
			DisableOnWords:      []string{},
			DisableOnAttributes: []string{fieldPathText},
		},
		Pagination: &meilisearch.Pagination{MaxTotalHits: 1000},
	}
}

// ensureSettings sends the settings that differ from the index's, if any: a settings
// change makes Meilisearch re-index, so a restart must not send them again.
func (ix *Index) ensureSettings(ctx context.Context) error {
	want := ix.settings()
	var have *meilisearch.Settings
	err := ix.retry(ctx, func() (err error) {
		have, err = ix.index.GetSettingsWithContext(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("meilisearch settings %s: %w", ix.uid, err)
	}
	diff := &meilisearch.Settings{}
	changed := false
	if !slices.Equal(have.RankingRules, want.RankingRules) {
		diff.RankingRules, changed = want.RankingRules, true
	}
	if !slices.Equal(have.SearchableAttributes, want.SearchableAttributes) {
		diff.SearchableAttributes, changed = want.SearchableAttributes, true
	}
	if !sameSet(have.DisplayedAttributes, want.DisplayedAttributes) {
		diff.DisplayedAttributes, changed = want.DisplayedAttributes, true
	}
	if !sameSet(have.FilterableAttributes, want.FilterableAttributes) {
		diff.FilterableAttributes, changed = want.FilterableAttributes, true
	}
	// Settings Quarry never sets, which someone else may have (a person at the dashboard,
	// another tool or release), each changing what a search finds: put back to
	// Meilisearch's defaults. An empty value is omitted from a settings update; only a
	// reset clears one.
	for _, r := range []struct {
		what  string
		set   bool
		reset func(context.Context) (*meilisearch.TaskInfo, error)
	}{
		{"stop words", len(have.StopWords) > 0, ix.index.ResetStopWordsWithContext},
		// One hit per value: the other documents sharing it were never found.
		{"distinct attribute", have.DistinctAttribute != nil && *have.DistinctAttribute != "", ix.index.ResetDistinctAttributeWithContext},
		{"synonyms", len(have.Synonyms) > 0, ix.index.ResetSynonymsWithContext},
		// Tokenisation: Quarry's analysis has already split the text.
		{"dictionary", len(have.Dictionary) > 0, ix.index.ResetDictionaryWithContext},
		{"separator tokens", len(have.SeparatorTokens) > 0, ix.index.ResetSeparatorTokensWithContext},
		{"non-separator tokens", len(have.NonSeparatorTokens) > 0, ix.index.ResetNonSeparatorTokensWithContext},
		{"localized attributes", len(have.LocalizedAttributes) > 0, ix.index.ResetLocalizedAttributesWithContext},
		{"proximity precision", have.ProximityPrecision != "" && have.ProximityPrecision != meilisearch.ByWord, ix.index.ResetProximityPrecisionWithContext},
		// Unknown words are matched as prefixes, as in the embedded engine.
		{"prefix search", have.PrefixSearch != nil && *have.PrefixSearch != "indexingTime", ix.index.ResetPrefixSearchWithContext},
		{"search cutoff", have.SearchCutoffMs != 0, ix.index.ResetSearchCutoffMsWithContext},
	} {
		if !r.set {
			continue
		}
		var info *meilisearch.TaskInfo
		err := ix.retry(ctx, func() (err error) {
			info, err = r.reset(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("meilisearch reset %s %s: %w", r.what, ix.uid, err)
		}
		if err := ix.wait(ctx, info, "reset "+r.what); err != nil {
			return err
		}
	}
	if t := have.TypoTolerance; t == nil || t.Enabled != want.TypoTolerance.Enabled ||
		t.MinWordSizeForTypos != want.TypoTolerance.MinWordSizeForTypos ||
		!sameSet(t.DisableOnAttributes, want.TypoTolerance.DisableOnAttributes) || len(t.DisableOnWords) != 0 {
		diff.TypoTolerance, changed = want.TypoTolerance, true
	}
	if p := have.Pagination; p == nil || p.MaxTotalHits != want.Pagination.MaxTotalHits {
		diff.Pagination, changed = want.Pagination, true
	}
	if !changed {
		return nil
	}
	var info *meilisearch.TaskInfo
	err = ix.retry(ctx, func() (err error) {
		info, err = ix.index.UpdateSettingsWithContext(ctx, diff)
		return err
	})
	if err != nil {
		return fmt.Errorf("meilisearch update settings %s: %w", ix.uid, err)
	}
	return ix.wait(ctx, info, "update settings")
}

// storedHashes returns the id and hash of every document in the index.
func (ix *Index) storedHashes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	const page = 1000
	for offset := int64(0); ; offset += page {
		var res meilisearch.DocumentsResult
		err := ix.retry(ctx, func() error {
			res = meilisearch.DocumentsResult{}
			return ix.index.GetDocumentsWithContext(ctx, &meilisearch.DocumentsQuery{Fields: []string{fieldID, fieldHash}, Limit: page, Offset: offset}, &res)
		})
		if err != nil {
			return nil, fmt.Errorf("meilisearch list documents %s: %w", ix.uid, err)
		}
		for _, h := range res.Results {
			var id, hash string
			if err := decodeField(h, fieldID, &id); err != nil {
				return nil, fmt.Errorf("meilisearch list documents %s: %w", ix.uid, err)
			}
			_ = decodeField(h, fieldHash, &hash) // a document without one is re-sent
			out[id] = hash
		}
		if len(res.Results) < page || offset+page >= res.Total {
			return out, nil
		}
	}
}

// write sends documents in batches, then deletes ids, waiting for each task. A batch
// holds at most BatchSize documents and, encoded, BatchBytes bytes (a document larger
// than that goes alone).
func (ix *Index) write(ctx context.Context, docs []document, deletes []string) error {
	var batch []encoded
	size := 0
	for _, d := range docs {
		raw, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("meilisearch add documents %s: %s: %w", ix.uid, d.Path, err)
		}
		// The body is a JSON array: the documents, a comma between each two, brackets.
		if len(batch) > 0 && (len(batch) >= ix.cfg.BatchSize || size+1+len(raw)+2 > ix.cfg.BatchBytes) {
			if err := ix.add(ctx, batch); err != nil {
				return err
			}
			batch, size = nil, 0
		}
		batch = append(batch, encoded{path: d.Path, raw: raw})
		size += len(raw) + 1
	}
	if len(batch) > 0 {
		if err := ix.add(ctx, batch); err != nil {
			return err
		}
	}
	// Deletions are cut into batches as adds are: their body is a JSON array of ids, and
	// sent all at once, a sync or a start removing many files was over the payload limit
	// (an ingress's 1 MB is ~15,000 ids) and refused with 413 on every try.
	for len(deletes) > 0 {
		n, size := 0, 2
		for n < len(deletes) && n < ix.cfg.BatchSize && (n == 0 || size+len(deletes[n])+3 <= ix.cfg.BatchBytes) {
			size += len(deletes[n]) + 3 // quoted, and a comma
			n++
		}
		if err := ix.del(ctx, deletes[:n]); err != nil {
			return err
		}
		deletes = deletes[n:]
	}
	return nil
}

// del deletes one batch of ids and waits for its task. A batch the server refuses as too
// large (413) is sent in halves, as add does: deleting an id twice or one that is gone
// changes nothing.
func (ix *Index) del(ctx context.Context, ids []string) error {
	var info *meilisearch.TaskInfo
	err := ix.retry(ctx, func() (err error) {
		info, err = ix.index.DeleteDocumentsWithContext(ctx, ids, nil)
		return err
	})
	if tooLarge(err) && len(ids) > 1 {
		half := len(ids) / 2
		if err := ix.del(ctx, ids[:half]); err != nil {
			return err
		}
		return ix.del(ctx, ids[half:])
	}
	if err != nil {
		return fmt.Errorf("meilisearch delete documents %s: %w", ix.uid, err)
	}
	return ix.wait(ctx, info, "delete documents")
}

// encoded is a document as its add request carries it.
type encoded struct {
	path string
	raw  json.RawMessage
}

// add sends one batch of documents and waits for its task. A batch the server refuses
// as too large (413: Meilisearch's --http-payload-size-limit, or a proxy's own limit,
// which may be far lower than -meili-batch-bytes) is sent in halves: nothing of it was
// accepted, and documents replace their namesakes, so the halves make the same change.
func (ix *Index) add(ctx context.Context, batch []encoded) error {
	body := make([]json.RawMessage, len(batch))
	for i, e := range batch {
		body[i] = e.raw
	}
	pk := fieldID
	var info *meilisearch.TaskInfo
	err := ix.retry(ctx, func() (err error) {
		info, err = ix.index.AddDocumentsWithContext(ctx, body, &meilisearch.DocumentOptions{PrimaryKey: &pk})
		return err
	})
	if tooLarge(err) {
		if len(batch) > 1 {
			half := len(batch) / 2
			if err := ix.add(ctx, batch[:half]); err != nil {
				return err
			}
			return ix.add(ctx, batch[half:])
		}
		return fmt.Errorf("meilisearch add documents %s: %s alone (%d bytes) is over the server's payload limit (Meilisearch's --http-payload-size-limit, or a proxy's in front of it): %w",
			ix.uid, batch[0].path, len(batch[0].raw), err)
	}
	if err != nil {
		return fmt.Errorf("meilisearch add documents %s: %w", ix.uid, err)
	}
	return ix.wait(ctx, info, "add documents")
}

// tooLarge reports whether a request was refused for the size of its body.
func tooLarge(err error) bool {
	var me *meilisearch.Error
	return errors.As(err, &me) && me.StatusCode == http.StatusRequestEntityTooLarge &&
		(me.ErrCode == meilisearch.MeilisearchApiError || me.ErrCode == meilisearch.MeilisearchApiErrorWithoutMessage)
}

// wait polls a task until Meilisearch has finished it; anything but success is an error
// carrying Meilisearch's message.
func (ix *Index) wait(ctx context.Context, info *meilisearch.TaskInfo, what string) error {
	ctx, cancel := context.WithTimeout(ctx, ix.cfg.TaskTimeout)
	defer cancel()
	var task *meilisearch.Task
	err := ix.retry(ctx, func() (err error) {
		task, err = ix.client.WaitForTaskWithContext(ctx, info.TaskUID, ix.cfg.TaskPoll)
		return err
	})
	if err != nil {
		// Meilisearch has the task and may still apply it: the next Open of this index
		// waits for it before comparing documents.
		unsettled.add(ix.uid, info.TaskUID)
		return fmt.Errorf("meilisearch %s %s: task %d: %w", what, ix.uid, info.TaskUID, err)
	}
	if task.Status != meilisearch.TaskStatusSucceeded {
		return fmt.Errorf("%w: %s %s: task %d %s: %s (%s)", ErrTaskFailed, what, ix.uid, info.TaskUID, task.Status, task.Error.Message, task.Error.Code)
	}
	return nil
}

// Apply sends the changed documents and deletes the removed ones, and returns once
// Meilisearch has applied both tasks. On error some of it may be applied; the caller
// undoes it by applying engine.Inverse.
func (ix *Index) Apply(ctx context.Context, changes []engine.Change) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	memo := text.StemMemo{}
	var send []document
	var drop []string
	delta := map[string]int{}
	n := 0
	for _, c := range changes {
		if c.Old != nil {
			_, stems := analyse(*c.Old, memo)
			for _, s := range stems {
				delta[s]--
			}
			n--
			if c.New == nil || c.New.Path != c.Old.Path {
				drop = append(drop, docID(c.Old.Path))
			}
		}
		if c.New != nil {
			if c.New.Path == "" {
				return errors.New("meilisearch apply: document without a path")
			}
			doc, stems := analyse(*c.New, memo)
			for _, s := range stems {
				delta[s]++
			}
			n++
			send = append(send, doc)
		}
	}
	err := ix.write(ctx, send, drop)
	// Counted even when the write failed: the server may hold some of it, and the caller
	// undoes it with the inverse changes (engine.Writer), whose Apply subtracts what this
	// one adds. Left uncounted, each refused write made the counts drift by a document.
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.n += n
	for s, d := range delta {
		if v := ix.vocab[s] + d; v > 0 {
			ix.vocab[s] = v
		} else {
			delete(ix.vocab, s)
		}
	}
	return err
}

// Len returns the number of indexed documents.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.n
}

// Name names the engine in the backend metrics.
func (ix *Index) Name() string { return "meilisearch" }

// Close releases the client's connections; the index stays on the server.
func (ix *Index) Close() error {
	ix.client.Close()
	return nil
}

// Search runs one query (see the package comment for how). A search whose connection
// failed, or that a proxy could not deliver, is sent once more (retrySearch).
func (ix *Index) Search(ctx context.Context, q engine.Query) ([]engine.Hit, error) {
	out, err := ix.SearchMany(ctx, []engine.Query{q})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// maxQueryWords is how many words of a query Meilisearch reads: it ignores the rest
// (a documented hard limit).
const maxQueryWords = 10

// chunkLimit is how many hits each part of a long all-terms query asks for, to be
// intersected: Meilisearch's default cap on a search's hits (pagination.maxTotalHits).
const chunkLimit = 1000

// plan is the Meilisearch requests one query becomes.
type plan struct {
	first, count int // the query's requests in the multi-search
	any          bool
	// chunks: an all-terms query of more than maxQueryWords words, asked in parts.
	chunks bool
	limit  int
	// idf weighs each word's request in an any-term search.
	idf []float64
}

// SearchMany runs queries in one HTTP request (one /multi-search, or one /search when a
// single request suffices).
func (ix *Index) SearchMany(ctx context.Context, qs []engine.Query) ([][]engine.Hit, error) {
	engine.NoteSearch()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("meilisearch search: %w", err)
	}
	var reqs []*meilisearch.SearchRequest
	plans := make([]plan, len(qs))
	ix.mu.RLock()
	for i, q := range qs {
		words := ix.tokens(q.Terms)
		limit := q.Limit
		if limit <= 0 {
			limit = ix.cfg.DefaultLimit
		}
		p := plan{first: len(reqs), limit: limit}
		if len(words) > 0 {
			filter := scopeFilter(q.Scope)
			all := make([]string, len(words))
			for i, w := range words {
				all[i] = w.query
			}
			switch {
			case (q.AllTerms || len(words) == 1) && len(all) <= maxQueryWords:
				reqs = append(reqs, ix.request(strings.Join(all, " "), meilisearch.All, filter, limit, q.Passage))
			case q.AllTerms:
				// Asked whole, the words after the tenth would be ignored, and they are the
				// words the index lacks (tokens puts them last): documents lacking them
				// matched "all" terms. Each part of ten is asked for all its words, and a
				// hit is a document every part finds.
				p.chunks = true
				passage := q.Passage // the first part's crop is the hit's passage
				for part := range slices.Chunk(all, maxQueryWords) {
					reqs = append(reqs, ix.request(strings.Join(part, " "), meilisearch.All, filter, chunkLimit, passage))
					passage = 0
				}
			default:
				p.any = true
				reqs = append(reqs, ix.request(strings.Join(all, " "), meilisearch.Last, filter, limit, q.Passage))
				for _, w := range words {
					reqs = append(reqs, ix.request(w.query, meilisearch.All, filter, limit, q.Passage))
					p.idf = append(p.idf, ix.idf(w.stem))
				}
			}
		}
		p.count = len(reqs) - p.first
		plans[i] = p
	}
	ix.mu.RUnlock()

	results, err := ix.run(ctx, reqs)
	if err != nil {
		return nil, err
	}
	out := make([][]engine.Hit, len(qs))
	for i, p := range plans {
		if p.count == 0 {
			continue
		}
		res := results[p.first : p.first+p.count]
		if p.chunks {
			out[i] = sortHits(everyPart(res), p.limit)
			continue
		}
		if !p.any {
			out[i] = sortHits(res[0], p.limit)
			continue
		}
		best := map[string]float64{}
		// A document's passage is the whole query's crop, else the crop of its best
		// single-word match.
		passage, weight := map[string]string{}, map[string]float64{}
		for _, h := range res[0] {
			best[h.Path] = h.Score
			passage[h.Path], weight[h.Path] = h.Passage, math.Inf(1)
		}
		// The per-word scores, weighed by the words' idf as BM25 weighs them: Meilisearch's
		// score says how well a document matches a word, not how telling the word is.
		sum, total := map[string]float64{}, 0.0
		for i, r := range res[1:] {
			total += p.idf[i]
			for _, h := range r {
				w := p.idf[i] * h.Score
				sum[h.Path] += w
				if w > weight[h.Path] || passage[h.Path] == "" {
					passage[h.Path], weight[h.Path] = h.Passage, w
				}
			}
		}
		for path, s := range sum {
			best[path] = max(best[path], s/total)
		}
		hits := make([]engine.Hit, 0, len(best))
		for path, s := range best {
			hits = append(hits, engine.Hit{Path: path, Score: s, Passage: passage[path]})
		}
		out[i] = sortHits(hits, p.limit)
	}
	return out, nil
}

// everyPart returns the documents that each part of a long all-terms query found, scored
// by their mean score over the parts, with the first part's passage.
func everyPart(parts [][]engine.Hit) []engine.Hit {
	found := map[string]int{}
	sum := map[string]float64{}
	for _, hits := range parts {
		for _, h := range hits {
			found[h.Path]++
			sum[h.Path] += h.Score
		}
	}
	var out []engine.Hit
	for _, h := range parts[0] {
		if found[h.Path] == len(parts) {
			out = append(out, engine.Hit{Path: h.Path, Score: sum[h.Path] / float64(len(parts)), Passage: h.Passage})
		}
	}
	return out
}

func (ix *Index) request(q string, strategy meilisearch.MatchingStrategy, filter string, limit, passage int) *meilisearch.SearchRequest {
	r := &meilisearch.SearchRequest{
		IndexUID:             ix.uid,
		Query:                q,
		MatchingStrategy:     strategy,
		Limit:                int64(limit),
		AttributesToRetrieve: []string{fieldPath},
		ShowRankingScore:     true,
	}
	if filter != "" {
		r.Filter = filter
	}
	if passage > 0 {
		// Meilisearch crops the content around the most distinct query words and puts
		// the crop in the hit's _formatted object.
		r.AttributesToCrop = []string{fieldContent}
		r.CropLength = int64(passage)
		r.CropMarker = cropMarker
	}
	return r
}

// cropMarker is what Meilisearch puts where it cut the content (its default, sent
// explicitly since it is stripped from passages).
const cropMarker = "…"

// run sends the requests and decodes each one's hits.
func (ix *Index) run(ctx context.Context, reqs []*meilisearch.SearchRequest) ([][]engine.Hit, error) {
	out := make([][]engine.Hit, len(reqs))
	switch len(reqs) {
	case 0:
		return out, nil
	case 1:
		r := *reqs[0]
		r.IndexUID = ""
		var res *meilisearch.SearchResponse
		err := ix.retrySearch(ctx, func() (err error) {
			res, err = ix.index.SearchWithContext(ctx, r.Query, &r)
			return err
		})
		if err != nil {
			return nil, ix.searchError(ctx, "search", err)
		}
		hits, err := decodeHits(res.Hits)
		if err != nil {
			return nil, fmt.Errorf("meilisearch search %s: %w", ix.uid, err)
		}
		out[0] = hits
		return out, nil
	}
	var res *meilisearch.MultiSearchResponse
	err := ix.retrySearch(ctx, func() (err error) {
		res, err = ix.client.MultiSearchWithContext(ctx, &meilisearch.MultiSearchRequest{Queries: reqs})
		return err
	})
	if err != nil {
		return nil, ix.searchError(ctx, "multi-search", err)
	}
	if len(res.Results) != len(reqs) {
		return nil, fmt.Errorf("meilisearch multi-search %s: %d results for %d queries", ix.uid, len(res.Results), len(reqs))
	}
	for i, r := range res.Results {
		hits, err := decodeHits(r.Hits)
		if err != nil {
			return nil, fmt.Errorf("meilisearch multi-search %s: %w", ix.uid, err)
		}
		out[i] = hits
	}
	return out, nil
}

// searchError wraps a failed search request. The library's errors do not unwrap to their
// cause, so when the caller's context ended while Meilisearch answered, the context's
// error is wrapped as well: callers tell a deadline or a cancellation from a failure by
// errors.Is (the gRPC edge answers DEADLINE_EXCEEDED or CANCELLED, not INTERNAL).
func (ix *Index) searchError(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("meilisearch %s %s: %w: %w", what, ix.uid, cerr, err)
	}
	if unavailable(err) {
		return fmt.Errorf("meilisearch %s %s: %w: %w", what, ix.uid, ErrUnavailable, err)
	}
	return fmt.Errorf("meilisearch %s %s: %w", what, ix.uid, err)
}

// unavailable reports whether err means Meilisearch could not answer (ErrUnavailable):
// what a write would retry (transient), or no answer within -meili-request-timeout.
func unavailable(err error) bool {
	var me *meilisearch.Error
	return transient(err) || errors.As(err, &me) &&
		(me.ErrCode == meilisearch.MeilisearchCommunicationError || me.ErrCode == meilisearch.MeilisearchTimeoutError)
}

// word is one query word: its stem and how it is written in a Meilisearch query.
type word struct{ stem, query string }

// tokens turns query terms into Meilisearch query words: stems, known ones quoted (exact
// match), unknown ones bare (typo and prefix matching) and last, since Meilisearch
// prefix-matches only the last word. The caller holds mu.
func (ix *Index) tokens(terms []string) []word {
	var known, unknown []word
	seen := map[string]bool{}
	for _, t := range terms {
		for _, w := range text.Words(t) {
			if text.IsStopWord(w) {
				continue
			}
			s := text.Stem(w)
			if seen[s] {
				continue
			}
			seen[s] = true
			if ix.vocab[s] > 0 {
				known = append(known, word{s, `"` + s + `"`})
			} else {
				unknown = append(unknown, word{s, s})
			}
		}
	}
	return append(known, unknown...)
}

// idf is a stem's BM25 inverse document frequency, ln(1 + (N-df+0.5)/(df+0.5)), as the
// ranking corpus computes it. The caller holds mu.
func (ix *Index) idf(stem string) float64 {
	n, df := float64(ix.n), float64(ix.vocab[stem])
	return math.Log(1 + (max(n-df, 0)+0.5)/(df+0.5))
}

// scopeFilter restricts a search to a folder and its subfolders ("" for none). It
// compares folder keys, not folder names: see folderKey.
func scopeFilter(scope string) string {
	scope = strings.Trim(scope, "/")
	if scope == "" {
		return ""
	}
	return fieldFolderKeys + ` = "` + folderKey(scope) + `"`
}

// folderKey is what the scope filter compares for a folder: the hex SHA-256 of its name.
// Meilisearch's `=` on strings is not the embedded engine's exact match: it compares
// values trimmed, NFKD-normalised and lower-cased ("Guides" finds the documents of
// "guides", "ﬁles" those of "files"), and it stores a filterable value cut at 468 bytes
// while the filter's value is not cut, so a folder whose path is longer matched no scope
// (https://www.meilisearch.com/docs/learn/filtering_and_sorting/filter_expression_reference,
// known limitations; milli's normalize_facet). A key is 64 bytes of [0-9a-f], which
// Meilisearch keeps as it is, and which needs no escaping in a filter.
func folderKey(folder string) string {
	sum := sha256.Sum256([]byte(folder))
	return hex.EncodeToString(sum[:])
}

// sortHits orders hits by score, then path (the embedded engine's order for ties), and
// caps them at limit.
func sortHits(hits []engine.Hit, limit int) []engine.Hit {
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Path < hits[j].Path
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

func decodeHits(hs meilisearch.Hits) ([]engine.Hit, error) {
	out := make([]engine.Hit, 0, len(hs))
	for _, h := range hs {
		var hit engine.Hit
		if err := decodeField(h, fieldPath, &hit.Path); err != nil {
			return nil, err
		}
		if err := decodeField(h, rankingScore, &hit.Score); err != nil {
			return nil, err
		}
		if raw, ok := h[formatted]; ok {
			var f struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, fmt.Errorf("hit field %q: %w", formatted, err)
			}
			hit.Passage = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(f.Content, cropMarker), cropMarker))
		}
		out = append(out, hit)
	}
	return out, nil
}

func decodeField(h meilisearch.Hit, name string, v any) error {
	raw, ok := h[name]
	if !ok {
		return fmt.Errorf("hit without %q", name)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("hit field %q: %w", name, err)
	}
	return nil
}

// maxBackoff caps the wait between two retries.
const maxBackoff = 5 * time.Second

// retry runs op until it succeeds, fails for another reason than the server being out of
// reach (see transient), or has been retried Config.Retries times, waiting RetryBackoff
// before the first retry and twice as long before each next one. Only idempotent
// requests go through it.
func (ix *Index) retry(ctx context.Context, op func() error) error {
	wait := ix.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || attempt >= ix.cfg.Retries || !transient(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// retrySearch runs a search request, and runs it once more, at once, when it failed in a
// way that says nothing about the search itself (see searchRetryable) and the caller is
// still waiting: a search changes nothing, so a second one is safe. Go's transport
// re-sends only GET-like requests when a kept-alive connection turns out closed, and a
// search is a POST, so a load balancer closing an idle connection as a search went out
// on it (AWS ALB after 60 s, nginx after 60-75 s, while the transport keeps connections
// 90 s) failed the query. Once only: a Meilisearch that is really down fails the query
// fast and the gateway degrades. The context bounds the retry as it bounds the first try.
func (ix *Index) retrySearch(ctx context.Context, op func() error) error {
	err := op()
	if err == nil || ctx.Err() != nil || !searchRetryable(err) {
		return err
	}
	return op()
}

// searchRetryable reports whether a failed search is worth sending again at once: the
// connection failed (refused, reset, closed before the answer), or a proxy in front of
// Meilisearch answered 502, 503 or 504 without a Meilisearch error (no healthy upstream
// for a moment). Not retried: a request that ran out of -meili-request-timeout (the
// server is slow or hung, and a second wait doubles it on every query), the caller's own
// deadline or cancellation, 429, and Meilisearch's own errors, among them its 503
// too_many_search_requests (its search queue is full: a retry adds to the load).
func searchRetryable(err error) bool {
	var me *meilisearch.Error
	if !errors.As(err, &me) {
		return false
	}
	switch me.ErrCode {
	case meilisearch.MeilisearchCommunicationError:
		return !errors.Is(me.OriginError, context.Canceled) && !errors.Is(me.OriginError, context.DeadlineExceeded)
	case meilisearch.MeilisearchApiErrorWithoutMessage:
		switch me.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// transient reports whether err means Meilisearch could not be reached or asked to be
// called again later: a connection refused or cut, or HTTP 429, 502, 503 or 504 (a
// restarting server, or the proxy in front of it). A failed task is not transient: it is
// Meilisearch's answer.
func transient(err error) bool {
	var me *meilisearch.Error
	if !errors.As(err, &me) || errors.Is(me.OriginError, context.Canceled) || errors.Is(me.OriginError, context.DeadlineExceeded) {
		return false
	}
	switch me.ErrCode {
	case meilisearch.MeilisearchCommunicationError:
		return true
	case meilisearch.MeilisearchApiError, meilisearch.MeilisearchApiErrorWithoutMessage:
		switch me.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// unsettled holds, per index uid, the tasks a write enqueued but could not follow to their
// end (the server went away while it waited): Meilisearch may still apply them. It is
// shared by every Index of the process, since a rebuild opens a new one on the same uid.
var unsettled = &taskSet{tasks: map[string][]int64{}}

type taskSet struct {
	mu    sync.Mutex
	tasks map[string][]int64
}

func (s *taskSet) add(uid string, task int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[uid] = append(s.tasks[uid], task)
}

func (s *taskSet) take(uid string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.tasks[uid]
	delete(s.tasks, uid)
	return out
}

// finishUnsettled waits for the tasks of this index that earlier writes could not follow
// to their end, whatever their outcome, so the documents compared next are final: those
// this process knows of, and the newest the server still has queued for the index. A
// write whose documents were accepted but whose answer was lost (the connection cut,
// the server gone) left a task whose uid no one knows; compared before it was applied,
// the index kept the documents of a write that had failed. Meilisearch processes an
// index's tasks in the order it enqueued them, so once the newest is done all are.
func (ix *Index) finishUnsettled(ctx context.Context) error {
	var pending *meilisearch.TaskResult
	err := ix.retry(ctx, func() (err error) {
		pending, err = ix.client.GetTasksWithContext(ctx, &meilisearch.TasksQuery{
			IndexUIDS: []string{ix.uid},
			Statuses:  []meilisearch.TaskStatus{meilisearch.TaskStatusEnqueued, meilisearch.TaskStatusProcessing},
			Limit:     1,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("meilisearch %s: list queued tasks: %w", ix.uid, err)
	}
	tasks := unsettled.take(ix.uid)
	if len(pending.Results) > 0 {
		tasks = append(tasks, pending.Results[0].UID)
	}
	for i, uid := range tasks {
		wctx, cancel := context.WithTimeout(ctx, ix.cfg.TaskTimeout)
		err := ix.retry(wctx, func() error {
			_, err := ix.client.WaitForTaskWithContext(wctx, uid, ix.cfg.TaskPoll)
			return err
		})
		cancel()
		// Done, or unknown to the server (it lost its task queue): nothing to wait for.
		if err != nil && apiCode(err) != "task_not_found" {
			for _, t := range tasks[i:] {
				unsettled.add(ix.uid, t)
			}
			return fmt.Errorf("meilisearch %s: wait for task %d of an interrupted write: %w", ix.uid, uid, err)
		}
	}
	return nil
}

// apiCode returns Meilisearch's error code of err ("" when it is not an API error).
func apiCode(err error) string {
	var me *meilisearch.Error
	if errors.As(err, &me) {
		return me.MeilisearchApiError.Code
	}
	return ""
}

// docID is a path's primary key: Meilisearch ids allow only [A-Za-z0-9_-] and 511 bytes,
// and paths hold '/' and '.'.
func docID(path string) string {
	sum := sha256.Sum256([]byte(path))
	return hex.EncodeToString(sum[:])
}

// analyse turns a document into what the index stores, and returns the stems of its
// title and content (the words the index "knows").
func analyse(d engine.Doc, memo text.StemMemo) (document, []string) {
	title, ts := stems(d.Title, memo)
	content, cs := stems(d.Content, memo)
	pathText, _ := stems(engine.PathText(d.Path), memo)
	doc := document{
		ID:       docID(d.Path),
		Path:     d.Path,
		Title:    title,
		PathText: pathText,
		Content:  content,
		Folders:  engine.Ancestors(d.Folder),
		Archived: d.Archived,
		Summary:  d.Summary,
	}
	if doc.Folders == nil {
		doc.Folders = []string{}
	}
	doc.FolderKeys = make([]string, len(doc.Folders))
	for i, f := range doc.Folders {
		doc.FolderKeys[i] = folderKey(f)
	}
	if len(doc.Folders) > 0 {
		doc.Domain = doc.Folders[0]
	}
	raw, _ := json.Marshal(doc)
	sum := sha256.Sum256(append([]byte(schemaVersion+"\x00"+text.Version+"\x00"), raw...))
	doc.Hash = hex.EncodeToString(sum[:])
	seen := make(map[string]struct{}, len(ts)+len(cs))
	known := make([]string, 0, len(ts)+len(cs))
	for _, s := range append(ts, cs...) {
		if _, dup := seen[s]; !dup {
			seen[s] = struct{}{}
			known = append(known, s)
		}
	}
	return doc, known
}

// stems returns s as space-separated stems of its non-stop words, and the stems.
func stems(s string, memo text.StemMemo) (string, []string) {
	words := text.Words(s)
	out := words[:0]
	for _, w := range words {
		if text.IsStopWord(w) {
			continue
		}
		out = append(out, memo.Stem(w))
	}
	return strings.Join(out, " "), out
}

// The index has no stop words: they are removed by Quarry's analysis, with the platform
// list, before text reaches Meilisearch, exactly where the embedded engine removes them
// (before stemming). A stop-word setting on the index would act after stemming, where the
// stems of 33 ordinary English words are stop words ("owned" → "own", "others" → "other",
// "willing" → "will", measured against /usr/share/dict/american-english), and would drop
// those words from documents and queries alike.

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}
