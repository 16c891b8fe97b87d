// Package bleve is the embedded engine.Backend: a Bleve scorch index scored with BM25, in
// memory or persisted in a directory so a restart answers its first query at once.
package bleve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	blevesearch "github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/token/stop"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/whitespace"
	"github.com/blevesearch/bleve/v2/analysis/tokenmap"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	bleveindex "github.com/blevesearch/bleve_index_api"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/engine"
)

// ErrNotIndex is returned when Config.Dir exists but does not hold a Bleve index: Build
// refuses to delete a directory it did not create.
var ErrNotIndex = errors.New("directory exists and is not a bleve index")

// Field names in the index.
const (
	fieldTitle   = "title"
	fieldPath    = "path"
	fieldContent = "content"
	// fieldFolders holds every ancestor folder of a document ("auth", "auth/jwt") as
	// keywords, so a scope filter is one exact term lookup.
	fieldFolders = "folders"

	analyzerName = "quarry_en"
	stopListName = "quarry_stop"

	// schemaVersion is part of the stored fingerprint, with text.Version: bump it whenever
	// the mapping or the way documents are turned into fields changes, so persisted
	// indexes are rebuilt.
	schemaVersion  = "quarry-bleve-3"
	fingerprintKey = "quarry_fingerprint"
	bm25Key        = "quarry_bm25_stats"
	metaFile       = "index_meta.json"
)

// Index is an engine.Backend over a Bleve index.
type Index struct {
	idx    blevesearch.Index
	cfg    Config
	n      int
	reused bool
	// bm25 carries the true average field lengths into every search; see bm25Stats.
	bm25 *search.BM25Stats
	// mu guards n and bm25, which Apply replaces while searches run.
	mu sync.RWMutex
	// writeMu serialises Apply.
	writeMu sync.Mutex
	// knownStems remembers known's answers for the index as it is; Apply replaces it
	// after each batch, so no search started after that reads an answer from before.
	knownStems atomic.Pointer[stemSet]
}

// stemSet is a bounded, concurrent map of stems to whether the index holds them in a
// title or content. Questions repeat a knowledge base's words, and looking a stem up in
// every segment's dictionary took a twelfth of a T3 question's Resolve.
type stemSet struct {
	m sync.Map // stem → bool
	n atomic.Int32
}

// maxKnownStems bounds a stemSet, which keeps no stem over maxRememberedWord; past
// them, stems are looked up in the index each time.
const maxKnownStems = 1 << 14

func (s *stemSet) get(stem string) (known, ok bool) {
	v, ok := s.m.Load(stem)
	if !ok {
		return false, false
	}
	return v.(bool), true
}

// put keeps a copy of stem: it may be a slice of a whole question.
func (s *stemSet) put(stem string, known bool) {
	if len(stem) <= maxRememberedWord && s.n.Load() < maxKnownStems {
		if _, loaded := s.m.LoadOrStore(strings.Clone(stem), known); !loaded {
			s.n.Add(1)
		}
	}
}

var (
	_ engine.Backend = (*Index)(nil)
	_ engine.Named   = (*Index)(nil)
)

// Build indexes docs. With cfg.Dir set it first tries to reopen the index persisted there,
// which it reuses if it was built with cfg.Fingerprint; otherwise it replaces it.
func Build(ctx context.Context, docs []engine.Doc, cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bleve config: %w", err)
	}
	if cfg.Dir != "" {
		ix, err := reopen(cfg)
		if err != nil {
			return nil, err
		}
		if ix != nil {
			// The stats were stored with the index; recounting 5,000 documents' tokens
			// would cost a restart most of its time.
			if ix.bm25 == nil {
				ix.bm25 = bm25Stats(docs)
			}
			return ix, nil
		}
		if err := removeIndexDir(cfg.Dir); err != nil {
			return nil, err
		}
	}
	m, err := newMapping()
	if err != nil {
		return nil, fmt.Errorf("bleve mapping: %w", err)
	}
	// NewUsing with scorch, not NewMemOnly: the latter picks upsidedown, which ignores the
	// mapping's BM25 scoring model and scores tf-idf.
	idx, err := blevesearch.NewUsing(cfg.Dir, m, scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, fmt.Errorf("bleve create %q: %w", cfg.Dir, err)
	}
	ix := &Index{idx: idx, cfg: cfg, bm25: bm25Stats(docs)}
	ix.knownStems.Store(new(stemSet))
	if err := ix.load(ctx, docs); err != nil {
		_ = idx.Close()
		return nil, err
	}
	if cfg.Dir != "" && cfg.Fingerprint != "" && ix.bm25 != nil {
		raw, err := json.Marshal(ix.bm25)
		if err == nil {
			err = idx.SetInternal([]byte(bm25Key), raw)
		}
		if err != nil {
			_ = idx.Close()
			return nil, fmt.Errorf("bleve store bm25 stats: %w", err)
		}
	}
	if cfg.Dir != "" && cfg.Fingerprint != "" {
		// Written last: an interrupted build leaves no fingerprint and is rebuilt.
		if err := idx.SetInternal([]byte(fingerprintKey), []byte(storedFingerprint(cfg))); err != nil {
			_ = idx.Close()
			return nil, fmt.Errorf("bleve store fingerprint: %w", err)
		}
	}
	return ix, nil
}

// reopen returns the persisted index in cfg.Dir if its fingerprint matches, nil if there is
// nothing reusable.
func reopen(cfg Config) (*Index, error) {
	if cfg.Fingerprint == "" {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, metaFile)); err != nil {
		return nil, nil
	}
	if err := segmentsIntact(cfg.Dir); err != nil {
		// Scorch opens a segment damaged in the middle without a word, and every
		// search of it fails: rebuilt, as a corrupt index is.
		return nil, nil
	}
	idx, err := blevesearch.Open(cfg.Dir)
	if err != nil {
		// A corrupt or foreign-version index is rebuilt, not fatal.
		return nil, nil
	}
	fp, err := idx.GetInternal([]byte(fingerprintKey))
	if err != nil || string(fp) != storedFingerprint(cfg) {
		_ = idx.Close()
		return nil, nil
	}
	n, err := idx.DocCount()
	if err != nil {
		_ = idx.Close()
		return nil, fmt.Errorf("bleve count %q: %w", cfg.Dir, err)
	}
	ix := &Index{idx: idx, cfg: cfg, n: int(n), reused: true}
	ix.knownStems.Store(new(stemSet))
	if raw, err := idx.GetInternal([]byte(bm25Key)); err == nil && len(raw) > 0 {
		var st search.BM25Stats
		if json.Unmarshal(raw, &st) == nil && st.DocCount == float64(n) {
			ix.bm25 = &st
		}
	}
	return ix, nil
}

// segmentsIntact checks every segment file of the index in dir against the CRC-32 that
// ends it (zap's footer: the checksum of every byte before it, in all its versions).
// Scorch checks a segment's header and footer only, so a segment damaged in between (a
// bad sector, a torn write after a node crash) opened as sound and failed every search.
// Reading the segments costs a restart milliseconds (they are a few MB for 5,000
// files), and warms the page cache the first query reads them through.
func segmentsIntact(dir string) error {
	segs, err := filepath.Glob(filepath.Join(dir, storeDir, "*.zap"))
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for _, seg := range segs {
		if err := segmentIntact(seg, buf); err != nil {
			return fmt.Errorf("bleve segment %s: %w", seg, err)
		}
	}
	return nil
}

func segmentIntact(path string, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	body := fi.Size() - 4
	if body < 0 {
		return errors.New("shorter than its checksum")
	}
	h := crc32.NewIEEE()
	if _, err := io.CopyBuffer(h, io.LimitReader(f, body), buf); err != nil {
		return err
	}
	var sum [4]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(sum[:]) != h.Sum32() {
		return errors.New("checksum mismatch")
	}
	return nil
}

func storedFingerprint(cfg Config) string {
	return schemaVersion + "\x00" + text.Version + "\x00" + cfg.Fingerprint
}

// storeDir is the folder scorch keeps its segments in, beside metaFile: a folder holding
// these two and nothing else is Bleve's.
const storeDir = "store"

// IsIndexDir reports whether dir holds a Bleve index, or the remains of one whose
// removal was cut short (its store folder without index_meta.json).
func IsIndexDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		switch {
		case e.Name() == metaFile && !e.IsDir():
		case e.Name() == storeDir && e.IsDir():
		default:
			return false
		}
	}
	return true
}

// RemoveIndexDir deletes a Bleve index folder (see IsIndexDir), index_meta.json last, so
// a removal cut short (a crash, a kill, a full disk) leaves a folder still recognised
// as an index, to be removed or rebuilt later. A missing folder is no error; a folder
// holding anything else is refused (ErrNotIndex).
func RemoveIndexDir(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !IsIndexDir(dir) {
		return fmt.Errorf("bleve dir %q: %w", dir, ErrNotIndex)
	}
	for _, name := range []string{storeDir, metaFile, ""} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("bleve remove index %q: %w", dir, err)
		}
	}
	return nil
}

// removeIndexDir clears dir for a new index, refusing anything that is neither missing,
// empty, nor a Bleve index (or the remains of one: see IsIndexDir).
func removeIndexDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bleve dir %q: %w", dir, err)
	}
	if len(entries) == 0 {
		// Bleve wants to create the directory itself.
		return os.Remove(dir)
	}
	return RemoveIndexDir(dir)
}

func (ix *Index) load(ctx context.Context, docs []engine.Doc) error {
	seen := make(map[string]struct{}, len(docs))
	batch := ix.idx.NewBatch()
	flush := func() error {
		if batch.Size() == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bleve build: %w", err)
		}
		if err := ix.idx.Batch(batch); err != nil {
			return fmt.Errorf("bleve batch: %w", err)
		}
		// A new batch, not Reset: scorch's analysis goroutine may still be ranging over
		// the old one's map after Batch returns (a data race under -race).
		batch = ix.idx.NewBatch()
		return nil
	}
	for _, d := range docs {
		if d.Path == "" {
			return errors.New("bleve index: document without a path")
		}
		if _, dup := seen[d.Path]; dup {
			continue
		}
		seen[d.Path] = struct{}{}
		if err := batch.Index(d.Path, fields(d)); err != nil {
			return fmt.Errorf("bleve index %s: %w", d.Path, err)
		}
		if batch.Size() >= ix.cfg.BatchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	ix.n = len(seen)
	return nil
}

// bm25Stats returns the document count and, per text field, the total number of indexed
// tokens. Bleve derives BM25's average field length as FieldCardinality / DocCount, and
// its own FieldCardinality is the number of DISTINCT terms in the field: on a 5,000-file
// KB that made the "average" content length ~4 tokens, so every 300-word document was
// scored as 75 times longer than average and short folder summaries out-scored the
// document holding the question's rare words (a unique word occurring twice scored 0.02).
// Handing Bleve the token totals makes avgdl the real average.
// Without documents (an index reopened by a caller that has none) Bleve keeps its own.
func bm25Stats(docs []engine.Doc) *search.BM25Stats {
	if len(docs) == 0 {
		return nil
	}
	// The folders field is a non-scoring filter, but Bleve wants a stat for every field.
	st := &search.BM25Stats{FieldCardinality: map[string]int{fieldFolders: 0}}
	for _, d := range docs {
		count(st, d, 1)
	}
	return st
}

// fields turns a document into index fields. Text is split with the same word rules as
// platform/text before Bleve sees it, so the engine's terms and the ranking corpus's stems
// are the same (Bleve's own tokenizer keeps "refresh_token" and "e.g" whole).
func fields(d engine.Doc) map[string]any {
	f := map[string]any{
		fieldTitle:   strings.Join(text.Words(d.Title), " "),
		fieldPath:    strings.Join(text.Words(engine.PathText(d.Path)), " "),
		fieldContent: strings.Join(text.Words(d.Content), " "),
	}
	if folders := engine.Ancestors(d.Folder); len(folders) > 0 {
		f[fieldFolders] = folders
	}
	return f
}

func newMapping() (*mapping.IndexMappingImpl, error) {
	m := blevesearch.NewIndexMapping()
	m.ScoringModel = bleveindex.BM25Scoring
	stops := text.StopWords()
	sort.Strings(stops)
	tokens := make([]any, len(stops))
	for i, w := range stops {
		tokens[i] = w
	}
	// The platform stop list, not Bleve's: a query word the query path drops must be one
	// the index dropped too. Stemming is Snowball, text.Stem itself (stem.go; Bleve's
	// stock "en" analyzer uses the older Porter stemmer, whose stems differ).
	if err := m.AddCustomTokenMap(stopListName, map[string]any{
		"type":   tokenmap.Name,
		"tokens": tokens,
	}); err != nil {
		return nil, err
	}
	if err := m.AddCustomTokenFilter(stopListName, map[string]any{
		"type":           stop.Name,
		"stop_token_map": stopListName,
	}); err != nil {
		return nil, err
	}
	// Bleve's custom analyzer run through the indexing lane (lane.go), so indexing leaves
	// a core to searches.
	if err := m.AddCustomAnalyzer(analyzerName, map[string]any{
		"type":          laneAnalyzer,
		"tokenizer":     whitespace.Name,
		"token_filters": []any{lowercase.Name, stopListName, stemFilter},
	}); err != nil {
		return nil, err
	}
	m.DefaultAnalyzer = analyzerName
	m.IndexDynamic = false
	m.StoreDynamic = false
	m.DocValuesDynamic = false

	textField := func() *mapping.FieldMapping {
		f := blevesearch.NewTextFieldMapping()
		f.Analyzer = analyzerName
		f.Store = false
		f.IncludeInAll = false
		f.IncludeTermVectors = false
		f.DocValues = false
		return f
	}
	folders := blevesearch.NewKeywordFieldMapping()
	folders.Store = false
	folders.IncludeInAll = false
	folders.IncludeTermVectors = false
	folders.DocValues = false
	// A filter only: no scoring, so no norms.
	folders.SkipFreqNorm = true

	dm := blevesearch.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(fieldTitle, textField())
	dm.AddFieldMappingsAt(fieldPath, textField())
	dm.AddFieldMappingsAt(fieldContent, textField())
	dm.AddFieldMappingsAt(fieldFolders, folders)
	m.DefaultMapping = dm
	return m, m.Validate()
}

// Len returns the number of indexed documents.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.n
}

// Name names the engine in the backend metrics.
func (ix *Index) Name() string { return "bleve" }

// Reused reports whether Build reopened a persisted index instead of indexing.
func (ix *Index) Reused() bool { return ix.reused }

// Close releases the index (and its files' locks when persisted).
func (ix *Index) Close() error {
	if err := ix.idx.Close(); err != nil {
		return fmt.Errorf("bleve close: %w", err)
	}
	return nil
}

// Search runs q. Per term it matches the stem exactly in title, path and content, plus a
// prefix and a typo match in title and content at low boosts; terms are AND-ed when
// q.AllTerms, else OR-ed; the scope is a non-scoring filter so it leaves BM25 untouched.
func (ix *Index) Search(ctx context.Context, q engine.Query) ([]engine.Hit, error) {
	engine.NoteSearch()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bleve search: %w", err)
	}
	bq, err := ix.query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("bleve search: %w", err)
	}
	if bq == nil {
		return nil, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = ix.cfg.DefaultLimit
	}
	req := blevesearch.NewSearchRequestOptions(bq, limit, 0, false)
	ix.mu.RLock()
	bm25 := ix.bm25
	ix.mu.RUnlock()
	if bm25 != nil {
		req.PreSearchData = map[string]any{search.BM25PreSearchDataKey: bm25}
	}
	res, err := ix.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("bleve search: %w", err)
	}
	if err := ctx.Err(); err != nil {
		// The collector checks the context only every so many documents; a cancelled
		// search must not look like a complete one.
		return nil, fmt.Errorf("bleve search: %w", err)
	}
	hits := make([]engine.Hit, len(res.Hits))
	for i, h := range res.Hits {
		hits[i] = engine.Hit{Path: h.ID, Score: h.Score}
	}
	// Bleve leaves equal scores in index order; the query path needs the same order every
	// time for the same question.
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Path < hits[j].Path
	})
	return hits, nil
}

// query builds the Bleve query for q, nil when q has no searchable term.
func (ix *Index) query(ctx context.Context, q engine.Query) (query.Query, error) {
	words := searchWords(q.Terms)
	if len(words) == 0 {
		return nil, nil
	}
	known, err := ix.known(ctx, words)
	if err != nil {
		return nil, err
	}
	perTerm := make([]query.Query, len(words))
	approx := 0
	for i, w := range words {
		prefix, typo := ix.approximations(w, known[i])
		if (prefix || typo) && !known[i] {
			if approx++; approx > maxApproxTerms {
				prefix, typo = false, false
			}
		}
		perTerm[i] = ix.termQuery(w, prefix, typo, q.Near)
	}
	var main query.Query
	switch {
	case len(perTerm) == 1:
		main = perTerm[0]
	case q.AllTerms:
		main = query.NewConjunctionQuery(perTerm)
	default:
		main = query.NewDisjunctionQuery(perTerm)
	}
	scope := strings.Trim(q.Scope, "/")
	if scope == "" {
		return main, nil
	}
	filter := query.NewTermQuery(scope)
	filter.SetField(fieldFolders)
	return &query.BooleanQuery{Must: main, Filter: filter}, nil
}

// known reports for each word whether its stem occurs in the title or content of some
// document.
func (ix *Index) known(ctx context.Context, words []string) ([]bool, error) {
	out := make([]bool, len(words))
	if ix.cfg.PrefixKnown && ix.cfg.FuzzyKnown {
		return out, nil
	}
	// Loaded before the index is read: a set Apply replaces meanwhile is never read again.
	set := ix.knownStems.Load()
	var r bleveindex.IndexReader
	defer func() {
		if r != nil {
			_ = r.Close()
		}
	}()
	for i, w := range words {
		stem := text.Stem(w)
		if known, ok := set.get(stem); ok {
			out[i] = known
			continue
		}
		if r == nil {
			adv, err := ix.idx.Advanced()
			if err != nil {
				return nil, err
			}
			if r, err = adv.Reader(); err != nil {
				return nil, err
			}
		}
		for _, f := range []string{fieldTitle, fieldContent} {
			tfr, err := r.TermFieldReader(ctx, []byte(stem), f, false, false, false)
			if err != nil {
				return nil, err
			}
			n := tfr.Count()
			_ = tfr.Close()
			if n > 0 {
				out[i] = true
				break
			}
		}
		set.put(stem, out[i])
	}
	return out, nil
}

// maxApproxTerms bounds the words of one query the index lacks that get prefix and typo
// matches, in the query's order; the rest match exactly. Each costs walks of the field
// dictionaries (and a neighbour check), and a question is not a hundred misspelt words:
// 128 long words the KB lacks, within the query size limit, took 100 ms to resolve, most
// of it here.
const maxApproxTerms = 16

// fuzzyMaxLen is the longest word that gets a typo match: Bleve builds a Levenshtein
// automaton as long as the word, and a 1,500-letter word took 100 ms; no word a typo
// could be meant for is that long.
const fuzzyMaxLen = 32

// approximations reports whether the config gives word prefix and typo matches, for a
// word the index does (known) or does not contain.
func (ix *Index) approximations(word string, known bool) (prefix, typo bool) {
	c := ix.cfg
	prefix = c.PrefixBoost > 0 && (!known || c.PrefixKnown) && utf8.RuneCountInString(text.Stem(word)) >= c.PrefixMinLen
	n := utf8.RuneCountInString(word)
	typo = c.FuzzyBoost > 0 && c.Fuzziness > 0 && (!known || c.FuzzyKnown) && n >= c.FuzzyMinLen && n <= fuzzyMaxLen
	return prefix, typo
}

// termQuery matches one word: its stem exactly per field, then prefix and typo matches
// when asked (approximations, bounded by maxApproxTerms).
//
// By default only words the index lacks get prefix and typo matching. Measured with
// BenchmarkSearch (5,000 synthetic docs of 200-700 words, 3-word queries, every fifth with a
// typo; 2 shared, busy cores; p50/p99 per search):
//
//	                           all terms      any term
//	exact only (baseline)      0.33/2.7 ms    1.15/2.6 ms
//	default (unknown words)    0.63/3.0 ms    1.49/3.9 ms
//	every word expanded        4.6/16.6 ms    5.8/14.0 ms
//
// Expanding every word costs ~10x and blows the T2 budget (several searches per question,
// p99 < 20 ms over gRPC). It also adds little: a word the KB contains already matches
// exactly, and its typo neighbours ("vault" → "fault") are noise. Misspelt and partial words
// are the ones the KB lacks, and those still match.
//
// A typo match builds a Levenshtein automaton for the stem and walks the field's
// dictionary with it: half the CPU and two thirds of the allocations of resolving an
// out-of-domain question (BenchmarkResolve), to find nothing for most words a KB lacks.
// near (engine.Query.Near) tells those words apart at distance 1 in microseconds.
func (ix *Index) termQuery(word string, prefix, typo bool, near func(stem string) bool) query.Query {
	c := ix.cfg
	stem := text.Stem(word)
	var clauses []query.Query
	for _, f := range []struct {
		name  string
		boost float64
	}{{fieldTitle, c.TitleBoost}, {fieldPath, c.PathBoost}, {fieldContent, c.ContentBoost}} {
		if f.boost == 0 {
			continue
		}
		t := query.NewTermQuery(stem)
		t.SetField(f.name)
		t.SetBoost(f.boost)
		clauses = append(clauses, t)
	}
	// Prefix and typo matches stay off the path field: path segments repeat the title's
	// words and would double-count a weak match.
	approx := []struct {
		name  string
		boost float64
	}{{fieldTitle, c.TitleBoost}, {fieldContent, c.ContentBoost}}
	if prefix {
		for _, f := range approx {
			if f.boost == 0 {
				continue
			}
			p := query.NewPrefixQuery(stem)
			p.SetField(f.name)
			p.SetBoost(c.PrefixBoost * f.boost)
			clauses = append(clauses, p)
		}
	}
	if typo {
		// Without a neighbour the typo match is the term query Bleve's fuzzy searcher
		// falls back to when it finds no candidate: the same clause, so the same query
		// norm and scores, without the walk.
		typos := near == nil || c.Fuzziness > 1 || near(stem)
		for _, f := range approx {
			if f.boost == 0 {
				continue
			}
			var z query.Query
			if typos {
				fz := query.NewFuzzyQuery(stem)
				fz.SetField(f.name)
				fz.SetFuzziness(c.Fuzziness)
				fz.SetBoost(c.FuzzyBoost * f.boost)
				z = fz
			} else {
				tq := query.NewTermQuery(stem)
				tq.SetField(f.name)
				tq.SetBoost(c.FuzzyBoost * f.boost)
				z = tq
			}
			clauses = append(clauses, z)
		}
	}
	return disjunction(clauses)
}

func disjunction(clauses []query.Query) query.Query {
	if len(clauses) == 1 {
		return clauses[0]
	}
	return query.NewDisjunctionQuery(clauses)
}

// searchWords re-splits terms with the index's word rules and drops stop words and words
// whose stem is already there, so a caller's "refresh-token" still finds "refresh token"
// and "token tokens" is one term, not two.
func searchWords(terms []string) []string {
	var out []string
	seen := make(map[string]struct{}, len(terms))
	for _, t := range terms {
		for _, w := range text.Words(t) {
			if text.IsStopWord(w) {
				continue
			}
			stem := text.Stem(w)
			if _, dup := seen[stem]; dup {
				continue
			}
			seen[stem] = struct{}{}
			out = append(out, w)
		}
	}
	return out
}
