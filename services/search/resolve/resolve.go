// Package resolve runs the search side of the query path for one question: scoping,
// search (all terms, then any term), entity search, ranking, the out-of-domain check,
// the T2 gate and the answer.
package resolve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/platform/workers"
	"github.com/quarry-router/quarry/services/search/answer"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/gate"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/lexicon"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Config holds every setting of the search side of the query path.
type Config struct {
	Rank   rank.Config
	Gate   gate.Config
	Answer answer.Config
	// SearchLimit is how many engine hits each search considers.
	SearchLimit int
	// MaxSources bounds the sources returned with an answer.
	MaxSources int
}

// RegisterFlags registers the flags of every stage with SPEC's defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Rank.RegisterFlags(fs)
	c.Gate.RegisterFlags(fs)
	c.Answer.RegisterFlags(fs)
	fs.IntVar(&c.SearchLimit, "search-limit", 50, "engine hits considered per search")
	fs.IntVar(&c.MaxSources, "max-sources", 10, "sources returned with an answer")
}

// Validate rejects unusable settings.
func (c *Config) Validate() error {
	var errs []error
	if c.SearchLimit < 1 || c.SearchLimit > 1000 {
		errs = append(errs, fmt.Errorf("-search-limit must be in [1,1000], got %d", c.SearchLimit))
	}
	if c.MaxSources < 1 || c.MaxSources > 100 {
		errs = append(errs, fmt.Errorf("-max-sources must be in [1,100], got %d", c.MaxSources))
	}
	return errors.Join(append(errs, c.Rank.Validate(), c.Gate.Validate(), c.Answer.Validate())...)
}

// Stage is the wall time of one step.
type Stage struct {
	Name     string
	Duration time.Duration
	Outcome  string
}

// Trace records the inputs and the outcome of the routing decision.
type Trace struct {
	SearchText      string
	Scope           string
	AllTermsMatched bool
	EntityTerms     []string
	OODRule         string
	Decision        gate.Decision
}

// Result is the routing decision for one question.
type Result struct {
	KB               *kb.KB
	Route            gate.Route
	Answer           string
	FallbackDegraded bool
	// Results are the ranked results after the gap filter, at most MaxSources.
	Results []rank.Result
	// Excerpts maps each result's path to its best passage.
	Excerpts   map[string]string
	Prefetched []*tree.Document
	Trace      Trace
	Stages     []Stage
}

// Resolver answers questions against the knowledge bases of a registry.
type Resolver struct {
	cfg Config
	reg *kb.Registry
	now func() time.Time
	// pool runs the entity searches, each deep in the engine: kept goroutines spare
	// each one growing a stack.
	pool *workers.Pool
}

// New returns a resolver.
func New(cfg Config, reg *kb.Registry, now func() time.Time) *Resolver {
	return &Resolver{cfg: cfg, reg: reg, now: now, pool: workers.New()}
}

// query is a question split into what the engine searches for.
type query struct {
	scope string
	words []string // all words of the unscoped text
	terms []string // search terms: words minus stop words
	// stems are the stems that count as evidence in coverage: the terms' stems minus
	// everyday words the KB never uses. Such a word says nothing about which document
	// answers ("how OFTEN do backups run"), while a name the KB never uses still counts,
	// at full weight, against every document.
	stems []string
	// names are the words the question writes like names (lexicon.Names).
	names map[string]bool
	// oodWords and oodTerms are words and terms with the typos of gate OODTypos
	// corrected, for the out-of-domain rules and the answer's gaps.
	oodWords, oodTerms []string
	// literals are the words the question quotes as data (lexicon.Literals).
	literals map[string]bool
	// near is the knowledge base's rank.Corpus.Near, remembered for this question.
	near func(stem string) bool
}

// nearMemo remembers rank.Corpus.Near's answers for one question. Its searches (all
// terms, then any term, then each entity term, in parallel) ask about the same words the
// KB lacks, and each answer tries up to some 1,700 edits: of a question of 128 made-up
// words, half the CPU (BenchmarkResolveHostile).
type nearMemo struct {
	near func(stem string) bool
	mu   sync.Mutex
	seen map[string]bool
}

func (m *nearMemo) Near(stem string) bool {
	m.mu.Lock()
	near, ok := m.seen[stem]
	m.mu.Unlock()
	if ok {
		return near
	}
	// Asked outside the lock, so parallel entity searches do not wait on each other;
	// two asking at once both compute the same answer.
	near = m.near(stem)
	m.mu.Lock()
	m.seen[stem] = near
	m.mu.Unlock()
	return near
}

// MaxQueryWords bounds the words of a query that are read, once its opener and closer
// are set aside. No question comes near it, and each stage after (typo fixes, the
// engine's search over the terms, entity search, gates) costs with their number: a
// 64 KiB request of distinct words took seconds in the engine alone.
const MaxQueryWords = 128

// parse reads a question: its scope (an explicit one, or with selfScope and none given,
// the one its first word names), words, terms and names.
func (r *Resolver) parse(k *kb.KB, q, scope string, selfScope bool) (query, error) {
	if scope == "" && selfScope {
		scope, q = tree.ParseScope(q, k.Tree.Domains())
		scope = scopeFolder(k.Tree, scope)
	} else {
		clean, err := tree.CleanPath(scope)
		if err != nil {
			return query{}, fmt.Errorf("scope %q: %w", scope, err)
		}
		scope = clean
		// The engine's scope filter is exact: "Auth/JWT" would find nothing under
		// "auth/jwt", and the question would be called out of domain.
		if f, ok := k.Tree.Folder(clean); ok {
			scope = f
		}
	}
	// A closer before and after the courtesy words go: "... pls help" and "... in
	// detail please" both end in one.
	words := text.Words(q)[lexicon.Opener(q):]
	words = slices.DeleteFunc(words[:len(words)-lexicon.Closer(words)], lexicon.Courtesy)
	words = words[:len(words)-lexicon.Closer(words)]
	words = words[:min(len(words), MaxQueryWords)]
	terms := make([]string, 0, len(words))
	for _, w := range words {
		if !text.IsStopWord(w) {
			terms = append(terms, w)
		}
	}
	names := lexicon.NamesWith(q, r.cfg.Gate.Writing())
	var literals map[string]bool
	if r.cfg.Gate.OODLiterals {
		literals = lexicon.Literals(q)
	}
	// The user's data that no document holds ("12abc", "(#4711)") is no term: counted,
	// it would lower every document's coverage alike, and searched, it can only fail
	// the all-terms search (which then falls back to any term) or match by prefix or
	// typo.
	terms = slices.DeleteFunc(terms, func(t string) bool { return literals[t] && k.Corpus.DF(text.Stem(t)) == 0 })
	fixes := r.typos(k, q, terms)
	evidence := make([]string, 0, len(terms))
	for _, t := range terms {
		if f, ok := fixes[t]; ok {
			t = f
		}
		if k.Corpus.DF(text.Stem(t)) == 0 && !lexicon.NameLike(t, names) {
			continue
		}
		evidence = append(evidence, t)
	}
	fix := func(ws []string) []string {
		if len(fixes) == 0 {
			return ws
		}
		out := make([]string, len(ws))
		for i, w := range ws {
			if f, ok := fixes[w]; ok {
				w = f
			}
			out[i] = w
		}
		return out
	}
	return query{scope: scope, words: words, terms: terms, stems: text.Stems(evidence), names: names,
		oodWords: fix(words), oodTerms: fix(terms), literals: literals,
		near: (&nearMemo{near: k.Corpus.Near, seen: map[string]bool{}}).Near}, nil
}

// scopeFolder returns the folder a question's first word scopes it to (ParseScope): the
// deepest of the path and the folders above it that exists, matched as Tree.Folder
// matches (as written, else ignoring case: ParseScope matched only the domain in any
// case, and the engine's scope filter is exact). A question may start with a document's
// path, copied from a listing or a source, or with a folder that was renamed or
// mistyped ("auth/jwtt"): the engine's scope filter holds existing folders only, so the
// search found nothing and the question was called out of domain, an answer the
// gateway then cached. ParseScope returns only "" or paths under a domain, which
// exists.
func scopeFolder(t *tree.Tree, scope string) string {
	for p := scope; p != "." && p != "/"; p = path.Dir(p) {
		if f, ok := t.Folder(p); ok {
			return f
		}
	}
	return scope
}

// maxTypoTerms bounds the words of one question that typo correction tries. Each try
// stems up to ~1,700 edits of the word, and a question of 128 long words the KB lacks
// (within the query size limit) took 355 ms; questions carry a few typos, not dozens.
const maxTypoTerms = 8

// typos maps the terms that are typos of KB words (gate OODTypos, lexicon.Typo) to the
// word meant, trying at most maxTypoTerms of them (lexicon.TypoCandidate), in the
// question's order. Words the question capitalises are names, however close to a KB word.
func (r *Resolver) typos(k *kb.KB, q string, terms []string) map[string]string {
	if !r.cfg.Gate.OODTypos {
		return nil
	}
	var capital map[string]bool
	var out map[string]string
	tried := 0
	for _, t := range terms {
		if !lexicon.TypoCandidate(t) || k.Corpus.DF(text.Stem(t)) > 0 {
			continue // no edits to try, or no typo
		}
		if capital == nil {
			capital = lexicon.NamesWith(q, lexicon.Writing{Label: r.cfg.Gate.OODLabelNames})
		}
		if capital[t] {
			continue
		}
		if tried++; tried > maxTypoTerms {
			break
		}
		if f, ok := lexicon.Typo(t, k.Corpus.DF); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[t] = f
		}
	}
	return out
}

// Resolve routes a question.
func (r *Resolver) Resolve(ctx context.Context, kbID, q string) (*Result, error) {
	k, err := r.reg.Get(kbID)
	if err != nil {
		return nil, err
	}
	res := &Result{KB: k}
	// The decision goes on the caller's span, the search service's gRPC server span,
	// rather than a span of its own: at 100 % sampling every span costs CPU to start,
	// export and collect, and a resolve span would only repeat the server span's timing.
	span := trace.SpanFromContext(ctx)
	defer annotate(span, kbID, res)
	clock := newClock(ctx)

	pq, err := r.parse(k, q, "", true)
	if err != nil {
		return nil, err
	}
	res.Trace.Scope = pq.scope
	res.Trace.SearchText = strings.Join(pq.terms, " ")
	clock.stage(&res.Stages, "parse", text.Count(len(pq.terms), "term", "terms"), nil)

	cands, allTerms, err := r.search(ctx, k, pq)
	if err != nil {
		return nil, err
	}
	res.Trace.AllTermsMatched = allTerms
	clock.stage(&res.Stages, "search", text.Count(len(cands), "hit", "hits"), func() []attribute.KeyValue {
		if pq.scope == "" {
			return nil
		}
		return []attribute.KeyValue{attribute.String("quarry.scope", pq.scope)}
	})

	if r.cfg.Gate.NeedEntitySearch(len(cands)) {
		ents := r.cfg.Gate.EntityTerms(pq.words)
		res.Trace.EntityTerms = ents
		more, err := r.entitySearch(ctx, k, pq, ents, topScore(cands))
		if err != nil {
			return nil, err
		}
		cands = merge(cands, more)
		clock.stage(&res.Stages, "entity_search", text.Count(len(ents), "term", "terms")+", "+text.Count(len(cands), "hit", "hits"),
			func() []attribute.KeyValue {
				return []attribute.KeyValue{attribute.StringSlice("quarry.entity_terms", ents)}
			})
	}

	ranked := r.rank(k, pq, cands)
	clock.stage(&res.Stages, "rank", text.Count(len(ranked), "result", "results"), nil)

	rule, ood := r.cfg.Gate.OutOfDomain(gate.OODInput{
		Results:         ranked,
		Files:           k.Files(),
		AllTermsMatched: allTerms,
		Terms:           pq.oodTerms,
		Words:           pq.oodWords,
		Contains:        k.Corpus.Contains,
		InKB:            func(stem string) bool { return k.Corpus.DF(stem) > 0 },
		DF:              k.Corpus.DF,
		IDF:             k.Corpus.IDF,
		IsName:          func(w string) bool { return lexicon.NameLike(w, pq.names) },
		Written:         func(w string) bool { return pq.names[w] },
		Literal:         func(w string) bool { return pq.literals[w] },
	})
	res.Trace.OODRule = rule
	if ood {
		res.Route = gate.OutOfDomain
		res.Answer = answer.OutOfDomain()
		// Kept for the explain trace only: an out-of-domain answer has no sources.
		res.Results = ranked[:min(len(ranked), r.cfg.MaxSources)]
		clock.stage(&res.Stages, "gate", "out of domain: "+rule, func() []attribute.KeyValue {
			return append(gateAttrs(ranked, allTerms, nil), attribute.String("quarry.ood_rule", rule))
		})
		return res, nil
	}

	dec := r.cfg.Gate.Route(ranked)
	res.Trace.Decision = dec
	res.Route = dec.Route
	clock.stage(&res.Stages, "gate", dec.Reason, func() []attribute.KeyValue { return gateAttrs(ranked, allTerms, &dec) })

	if len(ranked) > r.cfg.MaxSources {
		ranked = ranked[:r.cfg.MaxSources]
	}
	// A hit is a document the search returned (SPEC: +3 each time), not one ranked below
	// the sources: those would gain importance for answers that never showed them.
	k.Signals.RecordHits(paths(ranked))
	res.Results = ranked
	res.Excerpts = make(map[string]string, len(ranked))
	for _, rr := range ranked {
		res.Excerpts[rr.Doc.Path] = r.excerpt(rr, pq.terms)
	}

	top := r.cfg.Gate.Prefetch(ranked)
	docs := make([]*tree.Document, len(top))
	for i, t := range top {
		docs[i] = t.Doc
	}
	switch dec.Route {
	case gate.Direct:
		// Gaps of the words parsed, not of q: the words parse set aside (an opener,
		// politeness, the scope, the user's data) name nothing the answer could cover.
		res.Answer = answer.Direct(docs, answer.Gaps(pq.oodTerms, docs, k.Corpus.Contains), r.cfg.Answer)
	default:
		res.Prefetched = docs
		res.FallbackDegraded = true
		res.Answer = answer.Extractive(pq.oodTerms, ranked, func(d *tree.Document) string { return res.Excerpts[d.Path] }, k.Corpus.Contains,
			"no LLM answered; these are the passages of the knowledge base that best match the question")
	}
	clock.stage(&res.Stages, "answer", text.Count(len(docs), "document", "documents"), nil)
	return res, nil
}

// Search returns ranked results for a query under an explicit scope (the agent's
// search tool), "" for the whole knowledge base. The query is searched as written: a
// first word naming a domain does not scope it, as it does a question to Resolve. The
// API and the tool's description promise that, and a caller that wants a scope has a
// field for it.
func (r *Resolver) Search(ctx context.Context, kbID, q, scope string, limit int) (*kb.KB, []rank.Result, error) {
	k, err := r.reg.Get(kbID)
	if err != nil {
		return nil, nil, err
	}
	pq, err := r.parse(k, q, scope, false)
	if err != nil {
		return nil, nil, err
	}
	cands, _, err := r.search(ctx, k, pq)
	if err != nil {
		return nil, nil, err
	}
	if r.cfg.Gate.NeedEntitySearch(len(cands)) {
		more, err := r.entitySearch(ctx, k, pq, r.cfg.Gate.EntityTerms(pq.words), topScore(cands))
		if err != nil {
			return nil, nil, err
		}
		cands = merge(cands, more)
	}
	ranked := r.rank(k, pq, cands)
	if len(ranked) > limit {
		ranked = ranked[:limit]
	}
	// No hits recorded: a question counts its sources once, in Resolve; the agent's
	// searches repeat within one question's loop.
	return k, ranked, nil
}

// search runs the all-terms search and falls back to any term when it finds nothing.
func (r *Resolver) search(ctx context.Context, k *kb.KB, pq query) ([]rank.Candidate, bool, error) {
	if len(pq.terms) == 0 {
		return nil, false, nil
	}
	eq := engine.Query{Terms: pq.terms, Scope: pq.scope, AllTerms: true, Limit: r.cfg.SearchLimit, Passage: passageWords, Near: pq.near}
	hits, err := engine.Search(ctx, k.Engine, eq)
	if err != nil {
		return nil, false, fmt.Errorf("search %s: %w", k.ID, err)
	}
	all := len(hits) > 0
	if !all && len(pq.terms) > 1 {
		eq.AllTerms = false
		if hits, err = engine.Search(ctx, k.Engine, eq); err != nil {
			return nil, false, fmt.Errorf("search %s: %w", k.ID, err)
		}
	}
	return candidates(k, hits, false), all, nil
}

// passageWords is the passage asked of an engine that picks one (Meilisearch), in the
// indexed words it counts (stems, stop words removed): 30 of them span roughly 50 words of
// prose, well inside one ~800-character excerpt chunk, and are enough words for the
// passage to be found in one place of the file.
const passageWords = 30

// excerpt returns the chunk of a result's document around the engine's passage, or the
// chunk Excerpt picks by the query terms when the engine picked none (Bleve) or the file
// no longer holds it.
func (r *Resolver) excerpt(rr rank.Result, terms []string) string {
	if rr.Passage != "" {
		if ex, ok := r.cfg.Answer.ExcerptAround(rr.Doc.Content, rr.Passage); ok {
			return ex
		}
	}
	return r.cfg.Answer.Excerpt(rr.Doc.Content, terms)
}

// entitySearch searches each entity term on its own, in parallel (SPEC "Entity search").
//
// Engine scores of different queries are not on one scale (Bleve's query norm and
// coordination factors depend on the query), so each entity search's scores are rescaled
// to put its best hit level with the main search's best (mainTop; unchanged when the main
// search found nothing). Coverage then tells the document matching every word from the
// ones an entity search found for one word.
func (r *Resolver) entitySearch(ctx context.Context, k *kb.KB, pq query, ents []string, mainTop float64) ([]rank.Candidate, error) {
	qs := make([]engine.Query, len(ents))
	for i, e := range ents {
		qs[i] = engine.Query{Terms: []string{e}, Scope: pq.scope, AllTerms: true, Limit: r.cfg.SearchLimit, Near: pq.near}
	}
	var out [][]engine.Hit
	if ms, ok := k.Engine.(engine.MultiSearcher); ok && len(qs) > 1 {
		// One round trip to a remote engine instead of one per term.
		var err error
		if out, err = engine.SearchMany(ctx, ms, qs); err != nil {
			return nil, fmt.Errorf("entity search %s: %w", k.ID, err)
		}
	} else {
		out = make([][]engine.Hit, len(qs))
		errs := make([]error, len(qs))
		var wg sync.WaitGroup
		wg.Add(len(qs))
		for i, q := range qs {
			r.pool.Go(func() {
				defer wg.Done()
				out[i], errs[i] = engine.Search(ctx, k.Engine, q)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("entity search %s: %w", k.ID, err)
		}
	}
	var cands []rank.Candidate
	for _, hits := range out {
		rescale(hits, mainTop)
		cands = merge(cands, candidates(k, hits, true))
	}
	return cands, nil
}

// rescale multiplies hits' scores so that the best equals top (if top > 0).
func rescale(hits []engine.Hit, top float64) {
	best := 0.0
	for _, h := range hits {
		best = max(best, h.Score)
	}
	if top <= 0 || best <= 0 {
		return
	}
	for i := range hits {
		hits[i].Score *= top / best
	}
}

func topScore(cands []rank.Candidate) float64 {
	best := 0.0
	for _, c := range cands {
		best = max(best, c.EngineScore)
	}
	return best
}

func (r *Resolver) rank(k *kb.KB, pq query, cands []rank.Candidate) []rank.Result {
	summary := k.Tree.Summary
	if pq.scope != "" {
		// A match propagates to the summaries of the folders above it, but a scoped
		// question asked about the scope only: the folders above it are outside.
		summary = func(folder string) (*tree.Document, bool) {
			if folder != pq.scope && !strings.HasPrefix(folder, pq.scope+"/") {
				return nil, false
			}
			return k.Tree.Summary(folder)
		}
	}
	return r.cfg.Rank.Rank(r.now(), k.Corpus, pq.stems, cands,
		func(d *tree.Document) rank.Signal {
			s := k.Signals.Get(d.Path)
			return rank.Signal{Importance: s.Importance, Maturity: s.Maturity}
		},
		summary)
}

func candidates(k *kb.KB, hits []engine.Hit, entity bool) []rank.Candidate {
	out := make([]rank.Candidate, 0, len(hits))
	for _, h := range hits {
		d, ok := k.Tree.ByPath[h.Path]
		if !ok {
			continue // the index is built from the tree, so this is a stale hit at most
		}
		out = append(out, rank.Candidate{Doc: d, EngineScore: h.Score, FromEntity: entity, Passage: h.Passage})
	}
	return out
}

// merge adds the candidates of b whose path a does not have yet.
func merge(a, b []rank.Candidate) []rank.Candidate {
	seen := make(map[string]struct{}, len(a)+len(b))
	for _, c := range a {
		seen[c.Doc.Path] = struct{}{}
	}
	for _, c := range b {
		if _, ok := seen[c.Doc.Path]; ok {
			continue
		}
		seen[c.Doc.Path] = struct{}{}
		a = append(a, c)
	}
	return a
}

func paths(rs []rank.Result) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if !r.Propagated {
			out = append(out, r.Doc.Path)
		}
	}
	return out
}

var tracer = otel.Tracer("github.com/quarry-router/quarry/services/search/resolve")

// annotate puts the route on the span of the call that asked for it; the inputs of the
// decision are on the search.gate span beneath (gateAttrs).
//
// The server span keeps to otelgrpc's five attributes and these three, the most the
// SDK de-duplicates at span end without a map. It ends after the response is written,
// while the caller goes on to its next call on the same cores: with the gate's inputs on
// it too (eighteen attributes), tracing's cost to the cached answer a caller asked next
// was about 4 µs higher at p50, and 6 KB more was allocated per query.
func annotate(span trace.Span, kbID string, res *Result) {
	if !span.IsRecording() || res == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("quarry.kb", kbID)}
	// A Resolve that failed routed nothing: no route, rather than "unspecified".
	if res.Route != 0 {
		attrs = append(attrs, attribute.String("quarry.route", res.Route.String()))
	}
	if res.KB != nil {
		attrs = append(attrs, attribute.Int64("quarry.generation", int64(res.KB.Generation)))
	}
	span.SetAttributes(attrs...)
}

// gateAttrs are the inputs of the gate's decision, for its span (whose outcome says the
// decision): the top results' relevance, which the thresholds compare, how many results
// were ranked, whether every term matched, and the top document and its score. dec is
// nil when the out-of-domain check decided, before the relevance gate ran: it has no
// relevance to show, and zeros would read as relevance measured.
func gateAttrs(ranked []rank.Result, allTerms bool, dec *gate.Decision) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	if dec != nil {
		attrs = append(attrs,
			attribute.Float64("quarry.gate.top_relevance", dec.Top),
			attribute.Float64("quarry.gate.second_relevance", dec.Second))
	}
	attrs = append(attrs,
		attribute.Int("quarry.results", len(ranked)),
		attribute.Bool("quarry.all_terms_matched", allTerms))
	if len(ranked) > 0 {
		attrs = append(attrs, attribute.String("quarry.top_path", ranked[0].Doc.Path), attribute.Float64("quarry.top_score", ranked[0].Score))
	}
	return attrs
}

// clock times consecutive stages, for the explain trace, and records the stages that
// search or decide as child spans of the caller's span (when each stage ends, with its
// true start time).
type clock struct {
	ctx  context.Context
	now  func() time.Time
	last time.Time
}

// tracedStages are the stages that become spans: the searches and the gate (the
// out-of-domain check and the direct-answer gate), where a trace reader looks for what
// was found and why it routed so. Parsing, ranking and writing the answer take tens of
// microseconds each; their times stay in the explain trace (Result.Stages), and a span
// for each would add a third to the spans of every traced query.
var tracedStages = map[string]bool{"search": true, "entity_search": true, "gate": true}

// newClock uses the wall clock even when the resolver has a fixed one for recency.
func newClock(ctx context.Context) *clock { return &clock{ctx: ctx, now: time.Now, last: time.Now()} }

func (c *clock) stage(stages *[]Stage, name, outcome string, attrs func() []attribute.KeyValue) {
	t := c.now()
	*stages = append(*stages, Stage{Name: name, Duration: t.Sub(c.last), Outcome: outcome})
	if tracedStages[name] && trace.SpanFromContext(c.ctx).IsRecording() {
		kvs := []attribute.KeyValue{attribute.String("quarry.outcome", outcome)}
		if attrs != nil {
			// Built only for a traced call: an untraced one pays nothing for them.
			kvs = append(kvs, attrs()...)
		}
		_, span := tracer.Start(c.ctx, "search."+name, trace.WithTimestamp(c.last), trace.WithAttributes(kvs...))
		span.End(trace.WithTimestamp(t))
	}
	c.last = t
}

// Config returns the resolver's settings, for traces that report thresholds.
func (r *Resolver) Config() Config { return r.cfg }
