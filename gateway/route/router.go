// Package route orchestrates the query path's tiers: validation, the exact and fuzzy
// caches, the speculative search, the agent, and caching of every answer.
package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/generations"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/platform/workers"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Resolver runs the search side of the query path (SearchService.Resolve). It returns
// ErrUnknownKB (wrapped) when the search service does not know the knowledge base.
type Resolver interface {
	Resolve(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error)
}

// Agent answers questions routed to an LLM tier, calling onDelta with each piece of
// answer text as it is produced. It returns ErrNoProvider (wrapped) when it has no LLM.
type Agent interface {
	Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error)
}

// Generations tells the router each knowledge base's current generation. ok is false
// for an unknown knowledge base; err is set while the generations are not known yet.
type Generations interface {
	// State is a knowledge base's state; generations.ErrNotReady before the first.
	State(kb string) (st generations.State, ok bool, err error)
	// WaitReady blocks until the first state has arrived or ctx ends.
	WaitReady(ctx context.Context) error
	// Names lists the knowledge bases the search service serves, sorted.
	Names() []string
}

// Router answers queries from the fastest tier that can.
type Router struct {
	cfg   Config
	store cache.Store
	// copies is store when it can tell a hit from this replica's copy (cache.Near).
	copies copyStore
	res    Resolver
	agent  Agent
	gens   Generations
	log    *slog.Logger

	resolves group[resolved]
	answers  group[answered]
	metrics  *instruments
	// leases, when set (ShareAnswersVia), lets replicas take turns at the LLM.
	leases Leaser
}

// Leaser hands out leases that replicas sharing a cache see alike (cache.Redis): the
// replica that takes a question's lease asks the LLM; the others wait for its answer
// in the cache.
type Leaser interface {
	// TryLease takes the lease called name for ttl unless another holder has it,
	// renewing it until release is called.
	TryLease(ctx context.Context, name string, ttl time.Duration) (held bool, release func(), err error)
	// Awaited returns the entry cached for kb, gen and query, or nil, and whether the
	// lease called name is still held, read together.
	Awaited(ctx context.Context, name, kb string, gen uint64, query string) (*cache.Entry, bool, error)
}

// ShareAnswersVia has the router take turns with the other replicas of the cache
// through l, when Config.ShareAnswers is set: a question asked on several replicas at
// once (a new generation empties every replica's cache at once) goes to the LLM once.
// Call it before the router serves.
func (r *Router) ShareAnswersVia(l Leaser) {
	if r.cfg.ShareAnswers {
		r.leases = l
	}
}

// New returns a Router. agent may be nil: questions routed to an LLM tier then get the
// search service's extractive fallback, flagged as degraded.
func New(cfg Config, store cache.Store, res Resolver, agent Agent, gens Generations, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A flight's goroutine calls down through gRPC and its stats handlers; kept
	// goroutines spare it growing a stack each time.
	pool := workers.New()
	copies, _ := store.(copyStore)
	return &Router{cfg: cfg, store: store, copies: copies, res: res, agent: agent, gens: gens, log: log, metrics: newInstruments(),
		resolves: group[resolved]{pool: pool, linger: FlightLinger},
		// An answer degraded by a failure is not cached so that the LLM is asked again;
		// it does not linger either.
		answers: group[answered]{pool: pool, linger: FlightLinger,
			lingers: func(a answered) bool { return a.stored || !a.resp.GetDegraded() }}}
}

// FlightLinger is how long a finished search or answer stays joinable after its last
// caller has gone. It covers a cache round trip and the hedge delay under load (a
// burst of 100 identical questions over two replicas searched 3–4 times without it),
// and is short enough that a flushed cache is not second-guessed for long; a new
// generation never joins an older one's flight.
const FlightLinger = 250 * time.Millisecond

// resolved is the outcome of one Resolve flight.
type resolved struct {
	res *quarryv1.ResolveResponse
	// resp is the finished answer for OUT_OF_DOMAIN and DIRECT routes.
	resp   *quarryv1.QueryResponse
	stored bool
}

// answered is the outcome of one agent flight.
type answered struct {
	resp   *quarryv1.QueryResponse
	llm    *quarryv1.LlmTrace
	stored bool
	// peer: the answer another replica asked the LLM for (takeTurn).
	peer bool
}

// call is the state of one Query.
type call struct {
	r       *Router
	req     *quarryv1.QueryRequest
	kb      string
	norm    string
	tokens  []string
	gen     uint64 // the knowledge base's generation in the gateway's view
	key     uint64 // what its answers are cached under (generations.State.CacheKey)
	start   time.Time
	mark    time.Time
	explain *quarryv1.Explain // nil unless the request asked for it
	span    trace.Span        // the query's span; stages become its events
}

// Query answers req. onDelta, which may be nil, receives the answer text of LLM tiers
// as it is produced; it is not called after Query returns.
func (r *Router) Query(ctx context.Context, req *quarryv1.QueryRequest, onDelta func(string)) (*quarryv1.QueryResponse, error) {
	start := time.Now()
	if err := r.validate(req); err != nil {
		return nil, err
	}
	ctx, span, own := querySpan(ctx)
	if own {
		defer span.End()
	}
	c := &call{r: r, req: req, kb: req.GetKnowledgeBase(), start: start, mark: start, span: span}
	if req.GetExplain() {
		c.explain = &quarryv1.Explain{Cache: &quarryv1.CacheTrace{}}
	}
	c.norm = text.Normalise(req.GetQuery())
	c.stage("normalise", "")

	st, ok, err := r.gens.State(c.kb)
	if errors.Is(err, generations.ErrNotReady) {
		// A gateway just started (its health still NOT_SERVING, but a client need not
		// ask) answers once it knows the generations, within -resolve-timeout, rather
		// than UNAVAILABLE to a query a few milliseconds early.
		wctx, cancel := context.WithTimeout(ctx, r.cfg.ResolveTimeout)
		_ = r.gens.WaitReady(wctx) // State says what came of it
		cancel()
		st, ok, err = r.gens.State(c.kb)
		if err != nil && ctx.Err() != nil {
			// The caller gave up first: its deadline or cancel, not an outage.
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: generation of %q: %w", ErrUnavailable, c.kb, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w %q%s", ErrUnknownKB, c.kb, r.mayUse(ctx))
	}
	c.gen, c.key = st.Generation, st.CacheKey()

	resp, err := c.run(ctx, onDelta)
	if err != nil {
		return nil, err
	}
	resp.Elapsed = durationpb.New(time.Since(start))
	resp.Explain = c.explain
	r.metrics.record(ctx, span, resp, time.Since(start))
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.DebugContext(ctx, "query", "kb", c.kb, "tier", resp.GetTier().String(),
			"origin_tier", resp.GetOriginTier().String(), "degraded", resp.GetDegraded(), "elapsed", time.Since(start))
	}
	return resp, nil
}

func (c *call) run(ctx context.Context, onDelta func(string)) (*quarryv1.QueryResponse, error) {
	r := c.r
	if c.explain != nil {
		c.explain.Cache.NormalisedQuery = c.norm
	}

	// T0.
	var (
		e        *cache.Entry
		err      error
		fromCopy bool
	)
	if r.copies != nil {
		e, fromCopy, err = r.copies.GetCopy(ctx, c.kb, c.key, c.norm)
	} else {
		e, err = r.store.Get(ctx, c.kb, c.key, c.norm)
	}
	if err == nil {
		var resp *quarryv1.QueryResponse
		if resp, err = fromCache(e, quarryv1.Tier_TIER_EXACT_CACHE); err == nil {
			c.exactOutcome("hit", fromCopy)
			return resp, nil
		}
	}
	c.exactOutcome(lookupOutcome(ctx, r.log, "exact", err), false)

	c.tokens = text.Tokens(c.norm)
	if c.explain != nil {
		c.explain.Cache.Tokens = c.tokens
	}
	spec := c.speculate(ctx)
	defer spec.end()

	// T1.
	if resp := c.fuzzy(ctx, spec); resp != nil {
		return resp, nil
	}

	rf, joined := spec.start()
	out, err := rf.wait(ctx)
	if err != nil {
		c.stageSince("resolve", joined, "error")
		return nil, resolveError(ctx, err)
	}
	res := out.res
	c.stageSince("resolve", joined, res.GetRoute().String())
	if c.explain != nil {
		c.explain.Stages = append(c.explain.Stages, res.GetStages()...)
		c.explain.Gate = res.GetGate()
	}

	switch res.GetRoute() {
	case quarryv1.Tier_TIER_OUT_OF_DOMAIN, quarryv1.Tier_TIER_DIRECT:
		c.stored(out.stored)
		return shallowCopy(out.resp), nil
	case quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_AGENTIC:
		return c.agentAnswer(ctx, res, onDelta)
	default:
		return nil, fmt.Errorf("search service returned route %s", res.GetRoute())
	}
}

// speculation is a call's speculative search (SPEC §2), hedged: the Resolve flight
// starts when the fuzzy lookup returns without an answer it can serve at once, or when
// the lookup has run for Config.SpeculativeDelay, whichever comes first. A search
// started beside a lookup that then hits only burns the cores the hit needs (with Redis
// the lookup is a round trip, and the search's CPU made it wait); a lookup that is slow
// does not hold up the search of a miss by more than the delay.
type speculation struct {
	c     *call
	ctx   context.Context
	key   string
	timer *time.Timer // nil when the search started at once

	mu     sync.Mutex
	f      *flight[resolved]
	joined time.Time
	ended  bool
}

func (c *call) speculate(ctx context.Context) *speculation {
	s := &speculation{c: c, ctx: ctx, key: flightKey(c.kb, c.key, c.norm, c.req.GetExplain())}
	if d := c.r.cfg.SpeculativeDelay; d > 0 {
		s.timer = time.AfterFunc(d, func() { s.start() })
	} else {
		s.start()
	}
	return s
}

// start joins the call's Resolve flight unless it has already, and returns it with the
// time it was joined. After end it joins nothing and returns nil: a hedge timer that
// fires as the call returns must not start a search nobody waits for.
func (s *speculation) start() (*flight[resolved], time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil && !s.ended {
		c := s.c
		s.joined = time.Now()
		s.f = c.r.resolves.join(s.ctx, s.key, c.r.cfg.ResolveTimeout,
			c.r.resolveFn(c.kb, c.req.GetQuery(), c.norm, c.tokens, c.gen, c.key, c.req.GetExplain()))
	}
	return s.f, s.joined
}

// end leaves the flight, if one was joined; leaving without waiting for it is what
// cancels a search when the cache answers.
func (s *speculation) end() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.f != nil {
		s.c.r.resolves.leave(s.key, s.f)
	}
}

// fuzzy runs the T1 lookup and verification; it returns nil when T1 does not answer.
func (c *call) fuzzy(ctx context.Context, spec *speculation) *quarryv1.QueryResponse {
	r := c.r
	cand, sim, err := r.store.Similar(ctx, c.kb, c.key, c.tokens)
	if err != nil {
		c.fuzzyOutcome(lookupOutcome(ctx, r.log, "fuzzy", err))
		return nil
	}
	if cand.Query == c.norm {
		// This very question's answer was stored after the exact lookup missed, by the
		// flight this call joined or joins next (a finished flight stays joinable while
		// callers hold it, and lingers after): take the flight's result, not a cache hit
		// on it.
		c.fuzzyOutcome("skipped: this question's answer was just computed")
		return nil
	}
	if c.explain != nil {
		c.explain.Cache.FuzzyCandidate = cand.Query
		c.explain.Cache.FuzzySimilarity = sim
	}
	cached, err := fromCache(cand, quarryv1.Tier_TIER_FUZZY_CACHE)
	if err != nil {
		r.log.WarnContext(ctx, "fuzzy cache entry unreadable", "kb", c.kb, "err", err)
		c.reject(ctx, rejectUnreadable, "unreadable entry")
		return nil
	}

	// The checks below read the words themselves, which tokens leave out or stem.
	qw, cw := text.Words(c.norm), text.Words(cand.Query)
	// A negation is a stop word or a qualifier ("not", "without"), so a question and its
	// negation have the same tokens, or differ by an added word, and the search ranks
	// the same document first for both: only the words themselves tell them apart.
	if negations(cw) != negations(qw) {
		c.reject(ctx, rejectNegation, "one question negates what the other asks")
		return nil
	}
	// So is a stop word swapped for its opposite ("before" → "after", "up" → "down",
	// "more" → "less") or another question word ("when" → "why"): the tokens, and the
	// search's top document, stay the same.
	if gone, came, ok := opposite(cw, qw); ok {
		c.reject(ctx, rejectWordReplaced, fmt.Sprintf("%s replaced by %s asks another question", gone, came))
		return nil
	}
	// (a) The same stems ask the same thing in other words: serve at once, unless a
	// one-digit number was replaced (tokens leave those out, see contentWord), which the
	// search must judge like any other replaced word.
	if sameSet(text.Stems(c.tokens), text.Stems(cand.Tokens)) && !replaced(cw, qw) {
		return c.serveFuzzy(cached, "same stems")
	}
	// (b) Otherwise the fresh search must route the question the same way.
	rf, _ := spec.start()
	out, err := rf.wait(ctx)
	if err != nil {
		// A caller that gave up, or a question the search refuses, ends the query with
		// that error: counted as search_failed, they would hide real search outages.
		if rerr := resolveError(ctx, err); !errors.Is(rerr, ErrUnavailable) {
			c.fuzzyOutcome("not verified: " + rerr.Error())
			return nil
		}
		c.reject(ctx, rejectSearchFailed, "search failed, cannot verify")
		return nil
	}
	ok, reason, why := agrees(qw, cw, cand.Generation, cached, out.res)
	if !ok {
		c.reject(ctx, reason, why)
		return nil
	}
	return c.serveFuzzy(cached, why)
}

func (c *call) serveFuzzy(resp *quarryv1.QueryResponse, verification string) *quarryv1.QueryResponse {
	if c.explain != nil {
		c.explain.Cache.Fuzzy = "hit"
		c.explain.Cache.FuzzyVerification = verification
	}
	c.stage("fuzzy_cache", "hit: "+verification)
	return resp
}

func (c *call) fuzzyOutcome(outcome string) {
	if c.explain != nil {
		c.explain.Cache.Fuzzy = outcome
	}
	c.stage("fuzzy_cache", outcome)
}

// reject turns a fuzzy candidate down: reason is one of the reject* kinds, counted in
// the metrics; why says it in words, for the explain trace and the span.
func (c *call) reject(ctx context.Context, reason, why string) {
	c.r.metrics.reject(ctx, reason)
	if c.explain != nil {
		c.explain.Cache.Fuzzy = "rejected: " + why
		c.explain.Cache.FuzzyVerification = why
	}
	c.stage("fuzzy_cache", "rejected: "+why)
}

// agrees decides whether a fresh search confirms that the cached answer to candidate, a
// similar question, answers query (the words of both, normalised): both out of domain,
// or the same route and top source with no word of the candidate replaced by another.
//
// The search alone is not enough: a question that copies most of a document's wording
// but swaps its subject ("gzip NewReader creates a new Reader..." asked of zlib) still
// ranks that document first, so the search "agrees" with the cached answer to the
// original. A rewording adds or drops words (qualifiers, filler) around the same
// subject, which the search then confirms; a replaced content word names another
// subject (rotate vs revoke, gzip vs zlib), so it is another question. An out-of-domain
// answer is the same whatever was asked.
//
// candidateKey is what the candidate was cached under (answerKey): the fresh search
// must have decided on the same content.
func agrees(query, candidate []string, candidateKey uint64, cached *quarryv1.QueryResponse, res *quarryv1.ResolveResponse) (ok bool, reason, why string) {
	if k := answerKey(res, 0); k != 0 && k != candidateKey {
		return false, rejectGeneration, fmt.Sprintf("knowledge base changed (generation %d searched, cached under %d)", res.GetGeneration(), cached.GetGeneration())
	}
	route := res.GetRoute()
	origin := cached.GetOriginTier()
	if route == quarryv1.Tier_TIER_OUT_OF_DOMAIN && origin == quarryv1.Tier_TIER_OUT_OF_DOMAIN {
		return true, "", "search agrees: both out of domain"
	}
	if route != origin {
		return false, rejectRoute, fmt.Sprintf("search routes to %s, cached answer is %s", route, origin)
	}
	fresh, old := topPath(res.GetSources()), topPath(cached.GetSources())
	if fresh == "" || fresh != old {
		return false, rejectTopSource, fmt.Sprintf("top source %q differs from the cached answer's %q", fresh, old)
	}
	if gone, came := wordChanges(candidate, query); replacedIn(gone, came) {
		return false, rejectWordReplaced, fmt.Sprintf("search agrees, but %s replaced by %s asks another question",
			strings.Join(gone, ","), strings.Join(came, ","))
	}
	return true, "", fmt.Sprintf("search agrees: %s from %s", route, fresh)
}

// negationWords are the words that turn a question into its opposite, as text.Words
// writes them (apostrophes dropped: "can't" is "cant").
var negationWords = map[string]bool{
	"not": true, "no": true, "never": true, "without": true, "nor": true, "neither": true,
	"none": true, "nothing": true, "cannot": true, "cant": true, "dont": true, "doesnt": true,
	"didnt": true, "isnt": true, "arent": true, "wasnt": true, "werent": true, "wont": true,
	"wouldnt": true, "shouldnt": true, "couldnt": true, "hasnt": true, "havent": true,
	"hadnt": true, "mustnt": true, "neednt": true,
}

// negations counts the negating words of a question's words (text.Words).
func negations(words []string) int {
	n := 0
	for _, w := range words {
		if negationWords[w] {
			n++
		}
	}
	return n
}

// opposites are pairs of words, one of them at least a stop word (which the tokens and
// wordChanges leave out), that ask the opposite of each other. Swapping one for the
// other leaves the tokens alike, so the same-stems check and the search would both
// serve the other question's answer.
var opposites = [][2]string{
	{"up", "down"}, {"in", "out"}, {"on", "off"}, {"over", "under"}, {"above", "below"},
	{"before", "after"}, {"to", "from"}, {"into", "out"}, {"more", "less"}, {"more", "fewer"},
	{"most", "least"}, {"most", "fewest"}, {"all", "none"}, {"first", "last"},
}

// questionWords each ask another question of the same things ("when" the keys rotate is
// not "why"). "what" and "which" are left out: they are often one another's rewording.
var questionWords = []string{"who", "when", "where", "why", "how"}

// opposite reports whether the words tw (text.Words) swap a word of fw for its opposite
// (opposites) or for another question word, counting occurrences: a word only added or only dropped is a
// rewording. The word that came must stand where the one that went stood, next to a
// word (or the start or end of the question) that was next to it: "how do I export
// metrics from prometheus" and "how to export prometheus metrics" drop a "from" and add
// the "to" of "how to", which is no swap. It returns the two words.
func opposite(fw, tw []string) (gone, came string, ok bool) {
	count := func(ws []string) map[string]int {
		m := make(map[string]int)
		for _, w := range ws {
			m[w]++
		}
		return m
	}
	f, t := count(fw), count(tw)
	swapped := func(a, b string) bool {
		return f[a] > t[a] && t[b] > f[b] && sharesNeighbour(fw, a, tw, b)
	}
	for _, p := range opposites {
		for _, ab := range [][2]string{p, {p[1], p[0]}} {
			if swapped(ab[0], ab[1]) {
				return ab[0], ab[1], true
			}
		}
	}
	for _, a := range questionWords {
		for _, b := range questionWords {
			if a != b && swapped(a, b) {
				return a, b, true
			}
		}
	}
	return "", "", false
}

// sharesNeighbour reports whether a word before an a of x (or the start of x) is
// before a b of y, or a word after it (or the end of x) is after one: a word on the
// other side ("keys when deploying", "deploying how do") does not put b where a stood.
func sharesNeighbour(x []string, a string, y []string, b string) bool {
	// next holds the words on either side of each w of ws: "<" and ">" mark the side,
	// and a side with no word is the start or the end.
	next := func(ws []string, w string) map[string]bool {
		m := make(map[string]bool)
		for i, v := range ws {
			if v != w {
				continue
			}
			if i == 0 {
				m["<"] = true
			} else {
				m["<"+ws[i-1]] = true
			}
			if i == len(ws)-1 {
				m[">"] = true
			} else {
				m[">"+ws[i+1]] = true
			}
		}
		return m
	}
	nx := next(x, a)
	for w := range next(y, b) {
		if nx[w] {
			return true
		}
	}
	return false
}

// replaced reports whether the words to ask about something else than the words from:
// a content word of from gave way to another (wordChanges).
func replaced(from, to []string) bool { return replacedIn(wordChanges(from, to)) }

// replacedIn reports whether wordChanges' result replaced a word: some went and some
// came. Only added or only dropped words are a rewording (see agrees).
func replacedIn(gone, came []string) bool { return len(gone) > 0 && len(came) > 0 }

// contentWord reports whether a word of text.Words counts in the verification: a
// fuzzy-cache token (at least 2 characters, not a stop word), or a one-digit number.
// Tokens leave one-character words out, but a digit is what tells "node 3" from
// "node 4" or "python 2" from "python 3": questions with the same tokens that ask
// about different things.
func contentWord(w string) bool {
	if utf8.RuneCountInString(w) == 1 {
		r, _ := utf8.DecodeRuneInString(w)
		return unicode.IsDigit(r)
	}
	return !text.IsStopWord(w)
}

// wordChanges compares the content words (contentWord) of two questions' words
// (text.Words) as stems, counting each occurrence: a word asked twice and then once
// lost an occurrence ("http Serve ... HTTP connections" to "cgi Serve ... HTTP
// connections" replaced one http by cgi). It returns the stems from has more of than
// to, and those to has more of, sorted.
func wordChanges(from, to []string) (gone, came []string) {
	count := func(words []string) map[string]int {
		m := make(map[string]int)
		for _, w := range words {
			if contentWord(w) {
				m[text.Stem(w)]++
			}
		}
		return m
	}
	f, t := count(from), count(to)
	for s, n := range f {
		if n > t[s] {
			gone = append(gone, s)
		}
	}
	for s, n := range t {
		if n > f[s] {
			came = append(came, s)
		}
	}
	slices.Sort(gone)
	slices.Sort(came)
	return gone, came
}

func topPath(s []*quarryv1.Source) string {
	if len(s) == 0 {
		return ""
	}
	return s[0].GetPath()
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// resolveFn is the work of a Resolve flight: the search, and for the routes that need
// no LLM the finished answer, stored once for every caller that waits on it.
func (r *Router) resolveFn(kb, query, norm string, tokens []string, gen, key uint64, explain bool) func(context.Context, func(string)) (resolved, error) {
	return func(ctx context.Context, _ func(string)) (resolved, error) {
		res, err := r.res.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: kb, Query: query, Explain: explain})
		if err != nil {
			return resolved{}, err
		}
		out := resolved{res: res}
		switch res.GetRoute() {
		case quarryv1.Tier_TIER_OUT_OF_DOMAIN, quarryv1.Tier_TIER_DIRECT:
			g := answerGen(res, gen)
			out.resp = &quarryv1.QueryResponse{
				Tier:           res.GetRoute(),
				OriginTier:     res.GetRoute(),
				Answer:         res.GetAnswer(),
				Sources:        res.GetSources(),
				KnowledgeBase:  kb,
				Generation:     g,
				ContentVersion: res.GetContentVersion(),
			}
			out.stored = r.put(ctx, kb, answerKey(res, key), norm, tokens, out.resp)
		}
		return out, nil
	}
}

// answerGen is the generation an answer belongs to: the one the search decided under,
// which may be newer than the gateway's view.
func answerGen(res *quarryv1.ResolveResponse, fallback uint64) uint64 {
	if g := res.GetGeneration(); g != 0 {
		return g
	}
	return fallback
}

// answerKey is what an answer is cached under: the content version the search decided
// on (generations.State.CacheKey), whichever search replica that was.
func answerKey(res *quarryv1.ResolveResponse, fallback uint64) uint64 {
	return generations.State{Generation: answerGen(res, fallback), Version: res.GetContentVersion()}.CacheKey()
}

func (c *call) agentAnswer(ctx context.Context, res *quarryv1.ResolveResponse, onDelta func(string)) (*quarryv1.QueryResponse, error) {
	r := c.r
	start := time.Now()
	if r.agent == nil {
		c.stageSince("agent", start, "skipped: no agent configured")
		g := answerGen(res, c.gen)
		resp := degraded(c.kb, res, g, "no agent configured")
		// Without an agent this is the answer the configuration gives, so it is cached
		// like any other; only answers degraded by a failure wait for the LLM.
		c.stored(r.put(ctx, c.kb, answerKey(res, c.key), c.norm, c.tokens, resp))
		return resp, nil
	}
	g, k := answerGen(res, c.gen), answerKey(res, c.key)
	key := flightKey(c.kb, k, c.norm, false)
	fn := r.answerFn(c.kb, c.req.GetQuery(), c.norm, c.tokens, g, k, res)
	timeout := agentTimeout(ctx, r.cfg.AgentTimeout)
	af := r.answers.join(ctx, key, timeout, fn)
	// A flight started by a caller with a nearer deadline is bounded by it (agentTimeout).
	short := af.deadline.Before(time.Now().Add(timeout / 2))
	defer func() { r.answers.leave(key, af) }()
	var follow func(string)
	var got strings.Builder // the text this caller has sent on
	if onDelta != nil {
		follow = func(d string) { got.WriteString(d); onDelta(d) }
	}
	a, late, err := followWithin(ctx, af, timeout, follow)
	if err == nil && short && got.Len() == 0 && a.resp.GetDegraded() && !a.stored {
		// That flight ran out of its starter's time, or failed, before any text: this
		// caller, with far more time, asks again instead of taking the other caller's
		// fallback. A degraded flight is not joinable once over, so this starts anew.
		r.answers.leave(key, af)
		timeout = agentTimeout(ctx, r.cfg.AgentTimeout)
		af = r.answers.join(ctx, key, timeout, fn)
		a, late, err = followWithin(ctx, af, timeout, follow)
	}
	if err != nil {
		c.stageSince("agent", start, "error")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		reason := "the agent failed"
		if late {
			// The flight, started by a caller with more time, goes on for it; this caller
			// takes the fallback it would have had from a flight of its own.
			reason = agentFailure(context.DeadlineExceeded)
		} else {
			r.log.ErrorContext(ctx, "agent flight failed", "kb", c.kb, "err", err)
		}
		resp := degraded(c.kb, res, g, reason)
		// The fallback follows the text this caller has sent on: all the flight's text
		// when the flight failed, what it was given so far when it stopped waiting. The
		// flight is not this caller's to publish to, so it sends that last delta itself.
		if d := appendFallback(resp, got.String()); d != "" && onDelta != nil {
			onDelta(d)
		}
		return resp, nil
	}
	outcome := "answered"
	switch {
	case a.peer:
		outcome = "answered by another replica, served from the cache"
	case a.resp.GetDegraded():
		outcome = "degraded: " + a.resp.GetDegradedReason()
	}
	c.stageSince("agent", start, outcome)
	c.stored(a.stored)
	if c.explain != nil {
		c.explain.Llm = a.llm
	}
	return shallowCopy(a.resp), nil
}

// followWithin follows an agent flight for a caller whose own agent flight would have
// been bounded by timeout (agentTimeout). A flight started by a caller with more time
// ends later than that: this caller stops following it then, leaving the rest of its
// time for the fallback, and late reports that it did.
func followWithin(ctx context.Context, af *flight[answered], timeout time.Duration, fn func(string)) (a answered, late bool, err error) {
	if d := time.Now().Add(timeout); af.deadline.After(d) {
		wctx, cancel := context.WithDeadline(ctx, d)
		defer cancel()
		a, err = af.follow(wctx, fn)
		return a, err != nil && ctx.Err() == nil && wctx.Err() != nil, err
	}
	a, err = af.follow(ctx, fn)
	return a, false, err
}

// answerFn is the work of an agent flight. An agent failure is not an error of the
// flight: the question still gets the extractive fallback, flagged and not cached.
func (r *Router) answerFn(kb, query, norm string, tokens []string, gen, key uint64, res *quarryv1.ResolveResponse) func(context.Context, func(string)) (answered, error) {
	return func(ctx context.Context, publish func(string)) (answered, error) {
		if r.leases != nil {
			peer, release := r.takeTurn(ctx, kb, key, norm)
			if release != nil {
				defer release() // after the answer is cached, below
			}
			if peer != nil {
				publish(peer.GetAnswer())
				return answered{resp: peer, peer: true}, nil
			}
			if err := ctx.Err(); err != nil {
				// Out of time waiting for another replica: as an agent out of time, the
				// fallback, which a caller with more time asks again for (agentAnswer).
				return answered{resp: degraded(kb, res, gen, agentFailure(err))}, nil
			}
		}
		var streamed strings.Builder
		a, err := r.agent.Answer(ctx, &quarryv1.AnswerRequest{
			KnowledgeBase:  kb,
			Query:          query,
			Tier:           res.GetRoute(),
			Prefetched:     res.GetPrefetched(),
			Sources:        res.GetSources(),
			Generation:     gen,
			ContentVersion: res.GetContentVersion(),
		}, func(d string) {
			streamed.WriteString(d)
			publish(d)
		})
		if err != nil {
			reason := agentFailure(err)
			out := answered{resp: degraded(kb, res, gen, reason)}
			if d := appendFallback(out.resp, streamed.String()); d != "" {
				// Callers have received some LLM text already: the fallback follows it.
				publish(d)
			}
			if errors.Is(err, ErrNoProvider) && streamed.Len() == 0 {
				// Before any text, a configuration, not a failure: the fallback is the
				// answer until an LLM provider is configured, so cache it like any other.
				out.stored = r.put(ctx, kb, key, norm, tokens, out.resp)
				return out, nil
			}
			r.log.WarnContext(ctx, "agent did not answer; serving the extractive fallback", "kb", kb, "reason", reason, "err", err)
			return out, nil
		}
		resp := &quarryv1.QueryResponse{
			Tier:           res.GetRoute(),
			OriginTier:     res.GetRoute(),
			Answer:         a.GetAnswer(),
			Sources:        mergeSources(res.GetSources(), a.GetSources()),
			Degraded:       a.GetDegraded(),
			DegradedReason: a.GetDegradedReason(),
			KnowledgeBase:  kb,
			Generation:     gen,
			ContentVersion: res.GetContentVersion(),
		}
		out := answered{resp: resp, llm: a.GetLlm()}
		if !resp.GetDegraded() {
			out.stored = r.put(ctx, kb, key, norm, tokens, resp)
		}
		return out, nil
	}
}

// deadlineReserve: the agent flight a caller starts leaves 1/deadlineReserve of the
// caller's remaining time unused, to return the extractive fallback if the agent has
// not answered by then.
const deadlineReserve = 10

// agentTimeout bounds an agent flight: -agent-timeout, or less when the caller that
// starts it has a nearer deadline. The flight runs detached from its callers, so their
// deadlines reach the agent only through this one: the agent fits its loop into the
// deadline of its call (two thirds gathering, the rest concluding), and a flight bounded
// by -agent-timeout alone gathered until a caller with less time had given up, leaving
// it DEADLINE_EXCEEDED and no answer. Callers that join later share the flight as it is,
// but one with far more time asks again if it ends degraded before any text (agentAnswer).
func agentTimeout(ctx context.Context, timeout time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		return min(timeout, left-left/deadlineReserve)
	}
	return timeout
}

func agentFailure(err error) string {
	switch {
	case errors.Is(err, ErrNoProvider):
		return "no LLM provider configured"
	case errors.Is(err, context.DeadlineExceeded):
		return "the agent did not answer in time"
	default:
		return "the agent is unavailable"
	}
}

// degraded is the answer to an LLM route that no LLM gave: the search service's
// extractive fallback. Answers degraded by a failure are not cached, so the LLM answers
// once it is back.
func degraded(kb string, res *quarryv1.ResolveResponse, gen uint64, reason string) *quarryv1.QueryResponse {
	return &quarryv1.QueryResponse{
		Tier:           res.GetRoute(),
		OriginTier:     res.GetRoute(),
		Answer:         res.GetAnswer(),
		Sources:        res.GetSources(),
		Degraded:       true,
		DegradedReason: reason,
		KnowledgeBase:  kb,
		Generation:     gen,
		ContentVersion: res.GetContentVersion(),
	}
}

// appendFallback makes a degraded answer follow the text already streamed for it, as
// the agent's own fallback does: callers have received that text as deltas, and
// concatenated the deltas must equal the final answer (query.proto). It returns the
// delta still to be sent, "" when nothing was streamed and resp is left as it is.
func appendFallback(resp *quarryv1.QueryResponse, streamed string) string {
	if streamed == "" {
		return ""
	}
	d := "\n\n" + resp.GetAnswer()
	resp.Answer = streamed + d
	return d
}

// mergeSources lists the search's ranked sources first, then the documents the agent
// read beyond them. The search's top source stays first so that a fuzzy candidate's
// answer can be checked against a fresh search (see agrees).
func mergeSources(ranked, read []*quarryv1.Source) []*quarryv1.Source {
	out := slices.Clone(ranked)
	for _, s := range read {
		if !slices.ContainsFunc(out, func(o *quarryv1.Source) bool { return o.GetPath() == s.GetPath() }) {
			out = append(out, s)
		}
	}
	return out
}

// put caches an answer under key (answerKey), reporting whether it was stored; a cache
// that fails only costs a later hit, so errors are logged, not returned.
func (r *Router) put(ctx context.Context, kb string, key uint64, norm string, tokens []string, resp *quarryv1.QueryResponse) bool {
	value, err := proto.Marshal(resp)
	if err != nil {
		r.log.ErrorContext(ctx, "marshal answer for the cache", "kb", kb, "err", err)
		return false
	}
	err = r.store.Put(ctx, &cache.Entry{KB: kb, Generation: key, Query: norm, Tokens: tokens, Value: value})
	switch {
	case err == nil:
		return true
	case errors.Is(err, cache.ErrTooLarge):
		r.log.DebugContext(ctx, "answer too large to cache", "kb", kb, "bytes", len(value))
	case errors.Is(err, cache.ErrUnavailable):
		// Logged once per outage by the store.
	default:
		r.log.WarnContext(ctx, "cache put failed", "kb", kb, "err", err)
	}
	return false
}

// leaseTTL is how long a replica's turn at a question lasts unless renewed (the
// lease is renewed while the answer is written): a replica that dies while answering
// keeps the others waiting for at most this long.
const leaseTTL = 10 * time.Second

// peerPoll is how often a replica waiting for another's answer looks for it.
const peerPoll = 100 * time.Millisecond

// maxPeerFailures is how many Redis calls in a row may fail (each has -redis-timeout,
// 10 ms) before a replica waiting for another's answer stops waiting: one slow reply
// says nothing of the holder, a Redis that stays down does.
const maxPeerFailures = 10

// takeTurn decides which replica asks the LLM for a question. It returns the answer
// another replica cached, to serve as a cache hit; or release, when this replica took
// the question's lease and asks (release once the answer is cached); or neither, when
// this replica asks without the lease (Redis failed, or the holder let go without
// caching an answer: it failed, or its answer was degraded or too large) or ctx ended.
func (r *Router) takeTurn(ctx context.Context, kb string, key uint64, norm string) (peer *quarryv1.QueryResponse, release func()) {
	name := flightKey(kb, key, norm, false)
	held, release, err := r.leases.TryLease(ctx, name, leaseTTL)
	switch {
	case err != nil:
		return nil, nil
	case held:
		// The lease may be free because its holder has just cached the answer, after
		// this replica's lookup missed and while it searched.
		if e, _, err := r.leases.Awaited(ctx, name, kb, key, norm); err == nil && e != nil {
			if resp, err := fromCache(e, quarryv1.Tier_TIER_EXACT_CACHE); err == nil {
				release()
				return resp, nil
			}
		}
		return nil, release
	}
	return r.awaitPeer(ctx, name, kb, key, norm), nil
}

// awaitPeer waits until the answer the lease called name is held for reaches the
// cache, and returns it as a cache hit; nil when the holder lets go without caching an
// answer, Redis keeps failing, or ctx ends.
func (r *Router) awaitPeer(ctx context.Context, name, kb string, key uint64, norm string) *quarryv1.QueryResponse {
	t := time.NewTicker(peerPoll)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		e, held, err := r.leases.Awaited(ctx, name, kb, key, norm)
		switch {
		case err != nil:
			if failures++; failures >= maxPeerFailures {
				return nil
			}
		case e != nil:
			if resp, err := fromCache(e, quarryv1.Tier_TIER_EXACT_CACHE); err == nil {
				return resp
			}
			return nil
		case !held:
			return nil // the holder let go without caching an answer
		default:
			failures = 0
		}
	}
}

// fromCache decodes a cached answer for serving from tier.
func fromCache(e *cache.Entry, tier quarryv1.Tier) (*quarryv1.QueryResponse, error) {
	resp := &quarryv1.QueryResponse{}
	if err := proto.Unmarshal(e.Value, resp); err != nil {
		return nil, fmt.Errorf("decode cached answer: %w", err)
	}
	if resp.OriginTier == quarryv1.Tier_TIER_UNSPECIFIED {
		resp.OriginTier = resp.Tier
	}
	resp.Tier = tier
	resp.FromCache = true
	return resp, nil
}

// shallowCopy gives each caller of a coalesced flight its own response to set elapsed
// time and trace on; the sources are shared and never modified.
func shallowCopy(r *quarryv1.QueryResponse) *quarryv1.QueryResponse {
	return &quarryv1.QueryResponse{
		Tier:           r.GetTier(),
		OriginTier:     r.GetOriginTier(),
		FromCache:      r.GetFromCache(),
		Answer:         r.GetAnswer(),
		Sources:        r.GetSources(),
		Degraded:       r.GetDegraded(),
		DegradedReason: r.GetDegradedReason(),
		KnowledgeBase:  r.GetKnowledgeBase(),
		Generation:     r.GetGeneration(),
		ContentVersion: r.GetContentVersion(),
	}
}

// flightKey names the flight of a question. A traced request asks the search for its
// gate trace, which an untraced flight has none of, so it has flights of its own. The
// mark goes before the question, which may hold any character ("|" included): after it,
// a question ending in "|explain" would share the traced flight of the question before
// that suffix and be given that question's answer.
func flightKey(kb string, gen uint64, norm string, explain bool) string {
	mark := "-"
	if explain {
		mark = "e"
	}
	return kb + "|" + strconv.FormatUint(gen, 10) + "|" + mark + "|" + norm
}

// resolveError classifies a failed Resolve: the caller giving up, an answer the search
// service gave about the request itself, or the search being unavailable.
func resolveError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrUnknownKB), errors.Is(err, ErrInvalidQuery):
		return err
	default:
		return fmt.Errorf("%w: resolve: %w", ErrUnavailable, err)
	}
}

func lookupOutcome(ctx context.Context, log *slog.Logger, tier string, err error) string {
	if errors.Is(err, cache.ErrMiss) {
		return "miss"
	}
	// A shared cache that is down logs its outage once; a log line per query would
	// bury it.
	if !errors.Is(err, cache.ErrUnavailable) {
		log.WarnContext(ctx, "cache lookup failed", "tier", tier, "err", err)
	}
	return "error: " + err.Error()
}

// exactOutcome records the exact lookup, with the generation it was keyed by and, for
// a hit, whether this replica's copy of the shared cache served it.
func (c *call) exactOutcome(outcome string, fromCopy bool) {
	if c.explain != nil {
		c.explain.Cache.Exact = outcome
		c.explain.Cache.ExactReplicaCopy = fromCopy
	}
	gen := attribute.Int64("quarry.generation", int64(c.gen))
	if fromCopy {
		c.stage("exact_cache", outcome, gen, attribute.Bool("quarry.cache.replica_copy", true))
		return
	}
	c.stage("exact_cache", outcome, gen)
}

// copyStore is a store that says whether a hit came from this replica's copy of a
// shared cache (cache.Near), which the routing trace shows: such a hit makes no Redis
// call.
type copyStore interface {
	GetCopy(ctx context.Context, kb string, gen uint64, query string) (*cache.Entry, bool, error)
}

func (c *call) stored(ok bool) {
	if c.explain != nil {
		c.explain.Cache.Stored = ok
	}
}

// stage records the time since the previous stage ended; attrs go on its span event.
func (c *call) stage(name, outcome string, attrs ...attribute.KeyValue) {
	stageEvent(c.span, name, outcome, attrs...)
	if c.explain == nil {
		return
	}
	now := time.Now()
	c.explain.Stages = append(c.explain.Stages, &quarryv1.StageTiming{
		Name: name, Duration: durationpb.New(now.Sub(c.mark)), Outcome: outcome,
	})
	c.mark = now
}

// stageSince records a stage that began at start, which for the search is before the
// fuzzy lookup it overlapped.
func (c *call) stageSince(name string, start time.Time, outcome string) {
	if c.explain == nil {
		return
	}
	now := time.Now()
	c.explain.Stages = append(c.explain.Stages, &quarryv1.StageTiming{
		Name: name, Duration: durationpb.New(now.Sub(start)), Outcome: outcome,
	})
	c.mark = now
}

// mayUse names, for the message of an unknown knowledge base, the ones the caller may
// use (at most ten): "unknown knowledge base "platfrom"" left the caller guessing, and no
// call of the QueryService lists them. Never one the caller's key may not use.
func (r *Router) mayUse(ctx context.Context) string {
	const shown = 10
	var names []string
	for _, n := range r.gens.Names() {
		if auth.Allowed(ctx, n) {
			names = append(names, n)
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) > shown:
		return fmt.Sprintf(" (knowledge bases you may use: %s, and %d more)", strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return " (knowledge bases you may use: " + strings.Join(names, ", ") + ")"
}
