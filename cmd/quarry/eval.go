package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/kb"
	"google.golang.org/grpc"
)

// labelled is one line of an eval question file.
type labelled struct {
	Kind   string   `json:"kind"`
	Query  string   `json:"query,omitempty"`
	Expect []string `json:"expect,omitempty"`
	A      string   `json:"a,omitempty"`
	B      string   `json:"b,omitempty"`
	Same   *bool    `json:"same,omitempty"`
}

const (
	kindKnown = "known_item"
	kindOOD   = "out_of_domain"
	kindPair  = "pair"
)

// readLabelled reads JSONL question files; a line of an unknown kind or missing a
// field its kind needs is an error, so a typo never silently shrinks the set. So is a
// known-item or out-of-domain question that an earlier line asks already (the same
// words once normalised, as the exact cache keys them): asked again on the same system
// it is an exact-cache hit on its first asking's answer, scored twice.
func readLabelled(paths []string) ([]labelled, error) {
	var out []labelled
	asked := map[string]string{} // normalised question → where it was first asked
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		line := 0
		for sc.Scan() {
			line++
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			var q labelled
			if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", p, line, err)
			}
			if err := q.check(); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", p, line, err)
			}
			if q.Kind != kindPair {
				n := text.Normalise(q.Query)
				if first, ok := asked[n]; ok {
					f.Close()
					return nil, fmt.Errorf("%s:%d: %q is asked already at %s (merge the two lines: one question, every document that answers it in expect)", p, line, q.Query, first)
				}
				asked[n] = fmt.Sprintf("%s:%d", p, line)
			}
			out = append(out, q)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			// The line the scanner stopped on (bufio.ErrTooLong: over 1 MiB).
			return nil, fmt.Errorf("%s:%d: %w", p, line+1, err)
		}
	}
	if len(out) == 0 {
		// An empty file (or the wrong one) printed a report of n/a figures and exited 0.
		return nil, fmt.Errorf("%s: no questions (one JSON object a line: see README: Routing quality)", strings.Join(paths, ", "))
	}
	return out, nil
}

func (q labelled) check() error {
	switch q.Kind {
	case kindKnown:
		if q.Query == "" || len(q.Expect) == 0 {
			return errors.New("known_item needs query and expect")
		}
	case kindOOD:
		if q.Query == "" {
			return errors.New("out_of_domain needs query")
		}
	case kindPair:
		if q.A == "" || q.B == "" || q.Same == nil {
			return errors.New("pair needs a, b and same")
		}
	default:
		return fmt.Errorf("unknown kind %q (want known_item, out_of_domain or pair)", q.Kind)
	}
	return nil
}

// rate is a share with the counts it comes from; Den == 0 means not measured.
type rate struct {
	Num   int      `json:"num"`
	Den   int      `json:"den"`
	Value *float64 `json:"value"`
}

func newRate(num, den int) rate {
	r := rate{Num: num, Den: den}
	if den > 0 {
		v := float64(num) / float64(den)
		r.Value = &v
	}
	return r
}

func (r rate) String() string {
	if r.Value == nil {
		return "n/a"
	}
	return fmt.Sprintf("%5.1f %%  (%d/%d)", *r.Value*100, r.Num, r.Den)
}

// latency is the client-side wall time of the calls a tier served.
type latency struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// miss is one question the report counts against the router, for people to read.
type miss struct {
	What   string `json:"what"`
	Query  string `json:"query"`
	Tier   string `json:"tier"`
	Top    string `json:"top,omitempty"`
	Expect string `json:"expect,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// evalReport is what "quarry eval" prints.
type evalReport struct {
	KnownItems     int                `json:"known_items"`
	OutOfDomain    int                `json:"out_of_domain"`
	SamePairs      int                `json:"same_pairs"`
	DifferentPairs int                `json:"different_pairs"`
	SkippedPairs   int                `json:"skipped_pairs"`
	OtherHits      int                `json:"pairs_served_from_another_question"`
	TierMix        map[string]int     `json:"tier_mix"`
	CacheAnswered  int                `json:"cache_answered"`
	T2Precision    rate               `json:"t2_precision"`
	T2Coverage     rate               `json:"t2_coverage"`
	RecallAt1      rate               `json:"recall_at_1"`
	RecallAt5      rate               `json:"recall_at_5"`
	OODRecall      rate               `json:"ood_recall"`
	FalseOOD       rate               `json:"false_ood"`
	FuzzyHit       rate               `json:"fuzzy_hit"`
	FuzzyWrong     rate               `json:"fuzzy_wrong"`
	Latency        map[string]latency `json:"latency"`
	Phrasings      []phrasingResult   `json:"phrasings,omitempty"`
	Failed         []string           `json:"failed,omitempty"`
	Misses         []miss             `json:"misses,omitempty"`
}

// evalThresholds are the bars CI sets; a negative value is not checked.
type evalThresholds struct {
	MinT2Precision, MinT2Coverage, MinRecall1, MinOODRecall, MaxFalseOOD, MinFuzzyHit, MaxFuzzyWrong float64
	// MinPhrasingKept bars each -phrasings wrapping's share of routes kept.
	MinPhrasingKept float64
}

func (t *evalThresholds) register(fs *flag.FlagSet) {
	fs.Float64Var(&t.MinT2Precision, "min-t2-precision", -1, "fail below this T2 precision (0..1; negative: not checked)")
	fs.Float64Var(&t.MinT2Coverage, "min-t2-coverage", -1, "fail below this T2 coverage of known items")
	fs.Float64Var(&t.MinRecall1, "min-recall1", -1, "fail below this recall@1 of search")
	fs.Float64Var(&t.MinOODRecall, "min-ood-recall", -1, "fail below this out-of-domain recall")
	fs.Float64Var(&t.MaxFalseOOD, "max-false-ood", -1, "fail above this share of known items called out of domain")
	fs.Float64Var(&t.MinFuzzyHit, "min-fuzzy-hit", -1, "fail below this fuzzy-cache hit rate on same-answer pairs")
	fs.Float64Var(&t.MaxFuzzyWrong, "max-fuzzy-wrong", -1, "fail above this fuzzy-cache hit rate on different-answer pairs")
	fs.Float64Var(&t.MinPhrasingKept, "min-phrasing-kept", -1, "with -phrasings: fail when a wrapping keeps a smaller share of routes")
}

// check returns one line per missed bar. A bar on a figure that could not be measured
// (no questions of that kind) is missed: CI asked for something the set cannot show.
func (t evalThresholds) check(r *evalReport) []string {
	var out []string
	bar := func(name string, limit float64, got rate, min bool) {
		if limit < 0 {
			return
		}
		switch {
		case got.Value == nil:
			out = append(out, fmt.Sprintf("%s: not measured (no questions of that kind), bar %.3f", name, limit))
		case min && *got.Value < limit:
			out = append(out, fmt.Sprintf("%s %.4f < %.4f", name, *got.Value, limit))
		case !min && *got.Value > limit:
			out = append(out, fmt.Sprintf("%s %.4f > %.4f", name, *got.Value, limit))
		}
	}
	bar("T2 precision", t.MinT2Precision, r.T2Precision, true)
	bar("T2 coverage", t.MinT2Coverage, r.T2Coverage, true)
	bar("recall@1", t.MinRecall1, r.RecallAt1, true)
	bar("out-of-domain recall", t.MinOODRecall, r.OODRecall, true)
	bar("false out-of-domain", t.MaxFalseOOD, r.FalseOOD, false)
	bar("fuzzy hit", t.MinFuzzyHit, r.FuzzyHit, true)
	bar("fuzzy wrong-hit", t.MaxFuzzyWrong, r.FuzzyWrong, false)
	if t.MinPhrasingKept >= 0 && len(r.Phrasings) == 0 {
		out = append(out, fmt.Sprintf("route kept when wrapped: not measured (run with -phrasings), bar %.3f", t.MinPhrasingKept))
	}
	for _, p := range r.Phrasings {
		bar("route kept when wrapped as "+p.Phrasing, t.MinPhrasingKept, p.Kept, true)
	}
	return out
}

// errThresholds is returned when the figures miss a bar given on the command line.
var errThresholds = errors.New("thresholds missed")

// evalCmd is "quarry eval": route labelled questions through the public API and report
// how well the router did.
func evalCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kbDir := fs.String("kb", "", "knowledge base folder to serve in an embedded Quarry (its name is the KB id)")
	// A running gateway is reached as query reaches it: a gateway that requires an API
	// key or TLS refused every question UNAUTHENTICATED when eval could not present one.
	var gw serverFlags
	gw.register(fs, "", "running gateway to ask instead (then -kb-id names the KB; its caches are not reset)")
	addr := &gw.addr
	kbID := fs.String("kb-id", "", "knowledge base id with -addr (default: the -kb folder's name)")
	searchArgs := fs.String("search-flags", "", "embedded: extra search-service flags, space separated (e.g. \"-rank-coverage-exponent=0.65\")")
	gatewayArgs := fs.String("gateway-flags", "", "embedded: extra gateway flags, space separated (e.g. \"-fuzzy-min=0.7\")")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "list every question counted against the router")
	timeout := fs.Duration("timeout", 30*time.Second, "deadline of each call")
	wrapped := fs.Bool("phrasings", false, "also ask every known-item and out-of-domain question wrapped in words that name nothing (a greeting, thanks, a ticket number, ...) and count the routes kept; one fresh system per wrapping")
	var th evalThresholds
	th.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quarry eval (-kb DIR | -addr HOST:PORT -kb-id ID) [flags] questions.jsonl...")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no question files: pass one or more JSONL files (see README: Routing quality)")
	}
	if (*kbDir == "") == (*addr == "") {
		return usagef("pass exactly one of -kb (embedded) and -addr (running gateway)")
	}
	if *kbDir != "" && (gw.key != "" || gw.tls.On()) {
		return usagef("-api-key and -tls* are for a running gateway (-addr); the embedded one (-kb) takes neither")
	}
	// As query's: a -timeout of 0 failed every call as DEADLINE_EXCEEDED, and an -addr
	// without a port dialled port 443, each scored as a failed call, exit 1.
	if *addr != "" && !validTarget(*addr) {
		return usagef("-addr %q is not HOST:PORT (or a gRPC target such as dns:///HOST:PORT)", *addr)
	}
	if err := checkCallFlags(*timeout, *kbID); err != nil {
		return err
	}
	qs, err := readLabelled(fs.Args())
	if err != nil {
		return err
	}
	id := *kbID
	if id == "" {
		id = filepath.Base(filepath.Clean(*kbDir))
	}
	if id == "" || id == "." || id == string(filepath.Separator) {
		return usagef("-kb-id is required with -addr")
	}
	// The id names the folder the embedded Quarry serves the copy from: "-kb-id ../x"
	// (or "-kb .." without one) copied the knowledge base outside the temporary folder,
	// where the clean-up did not reach. A -kb folder's name is checked once the folder
	// is (startEval), so that a wrong -kb is reported as such.
	if (*kbID != "" || *addr != "") && !kb.ValidID(id) {
		return usagef("-kb-id %q is no knowledge base id (%s)", id, kb.IDRule)
	}

	// Each phase gets a fresh system so that it measures routing, not answers cached by
	// the other phase.
	target := func(run func(quarryv1.QueryServiceClient) error) error {
		dial := gw.dial
		if *addr == "" {
			sys, stop, err := startEval(ctx, *kbDir, id, strings.Fields(*searchArgs), strings.Fields(*gatewayArgs))
			if err != nil {
				return err
			}
			defer stop()
			dial = func() (*grpc.ClientConn, error) { return grpcx.Dial(sys.Gateway.String()) }
		}
		conn, err := dial()
		if err != nil {
			return err
		}
		defer conn.Close()
		return run(quarryv1.NewQueryServiceClient(conn))
	}
	ev := &evaluator{kb: id, timeout: *timeout, lat: map[string][]time.Duration{}, routes: map[string]routing{}, rep: &evalReport{TierMix: map[string]int{}}}
	if err := target(func(c quarryv1.QueryServiceClient) error { return ev.items(ctx, c, qs) }); err != nil {
		return err
	}
	if err := target(func(c quarryv1.QueryServiceClient) error { return ev.pairs(ctx, c, qs) }); err != nil {
		return err
	}
	for _, p := range phrasings {
		if !*wrapped {
			break
		}
		// A fresh system each: wrapped the same question again, a question would be
		// a fuzzy hit on its other wrapping's answer.
		if err := target(func(c quarryv1.QueryServiceClient) error { return ev.wrapped(ctx, c, qs, p) }); err != nil {
			return err
		}
	}
	rep := ev.finish()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(stdout, *verbose)
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d calls failed (first: %s)", len(rep.Failed), rep.Failed[0])
	}
	if missed := th.check(rep); len(missed) > 0 {
		for _, m := range missed {
			fmt.Fprintln(stderr, "MISSED", m)
		}
		return fmt.Errorf("%w: %s", errThresholds, strings.Join(missed, "; "))
	}
	return nil
}

// startEval serves a copy of one KB folder in an embedded Quarry: a copy, so the write
// side and the folder watcher can never touch the labelled corpus.
func startEval(ctx context.Context, kbDir, id string, searchArgs, gatewayArgs []string) (*system, func(), error) {
	if st, err := os.Stat(kbDir); err != nil {
		return nil, nil, fmt.Errorf("knowledge base folder %q not found", kbDir)
	} else if !st.IsDir() {
		return nil, nil, fmt.Errorf("-kb %q is a file: pass the knowledge base's folder", kbDir)
	}
	// A folder without markdown (the Go package platform/ beside examples/kb/platform)
	// loaded no document: every question came back out of domain, and eval exited 0.
	if files, _, err := collect(kbDir); err == nil && len(files) == 0 {
		return nil, nil, fmt.Errorf("-kb %q holds no markdown file: pass a knowledge base's folder (such as examples/kb/platform), or -addr with -kb-id for a running gateway", kbDir)
	}
	if !kb.ValidID(id) {
		return nil, nil, usagef("-kb %q: its folder name %q is no knowledge base id (%s); name one with -kb-id", kbDir, id, kb.IDRule)
	}
	root, err := os.MkdirTemp("", "quarry-eval-")
	if err != nil {
		return nil, nil, err
	}
	if err := copyKB(filepath.Join(root, id), kbDir); err != nil {
		os.RemoveAll(root)
		return nil, nil, fmt.Errorf("copy %s: %w", kbDir, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	sys, err := start(sctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: root,
		SearchArgs: searchArgs, GatewayArgs: gatewayArgs}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		os.RemoveAll(root)
		return nil, nil, err
	}
	return sys, func() { cancel(); <-sys.done; os.RemoveAll(root) }, nil
}

// evaluator accumulates the counts of one run.
type evaluator struct {
	kb      string
	timeout time.Duration
	rep     *evalReport
	lat     map[string][]time.Duration
	// routes holds each known-item and out-of-domain question's route, for -phrasings.
	routes map[string]routing

	direct, directRight, at1, at5, ood, falseOOD, sameHit, diffHit int
}

// ask queries q and records the call's latency by tier.
func (e *evaluator) ask(ctx context.Context, c quarryv1.QueryServiceClient, q string) (*quarryv1.QueryResponse, error) {
	began := time.Now()
	resp, err := e.query(ctx, c, q)
	if err != nil {
		return nil, err
	}
	t := tierName(resp.GetTier())
	e.lat[t] = append(e.lat[t], time.Since(began))
	return resp, nil
}

// query asks q with the trace, recording a failure in the report.
func (e *evaluator) query(ctx context.Context, c quarryv1.QueryServiceClient, q string) (*quarryv1.QueryResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	resp, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: e.kb, Query: q, Explain: true})
	if err != nil {
		e.rep.Failed = append(e.rep.Failed, fmt.Sprintf("%q: %v", q, err))
		return nil, err
	}
	return resp, nil
}

// items asks every known-item and out-of-domain question once.
func (e *evaluator) items(ctx context.Context, c quarryv1.QueryServiceClient, qs []labelled) error {
	for _, q := range qs {
		if q.Kind != kindKnown && q.Kind != kindOOD {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := e.ask(ctx, c, q.Query)
		if err != nil {
			continue
		}
		// A cache hit is scored by the route it carries (routeOf).
		rt := routeOf(resp)
		tier := rt.Tier
		if resp.GetFromCache() {
			e.rep.CacheAnswered++
		}
		e.rep.TierMix[tierName(tier)]++
		e.routes[q.Query] = rt
		ranked := rankedPaths(resp)
		top := ""
		if len(ranked) > 0 {
			top = ranked[0]
		}
		if q.Kind == kindOOD {
			e.rep.OutOfDomain++
			if tier == quarryv1.Tier_TIER_OUT_OF_DOMAIN {
				e.ood++
			} else {
				e.rep.Misses = append(e.rep.Misses, miss{What: "out of domain answered", Query: q.Query, Tier: tierName(tier), Top: top, Detail: gateDetail(resp)})
			}
			continue
		}
		e.rep.KnownItems++
		if slices.Contains(q.Expect, top) {
			e.at1++
		}
		for _, p := range ranked[:min(5, len(ranked))] {
			if slices.Contains(q.Expect, p) {
				e.at5++
				break
			}
		}
		switch tier {
		case quarryv1.Tier_TIER_OUT_OF_DOMAIN:
			e.falseOOD++
			e.rep.Misses = append(e.rep.Misses, miss{What: "false out of domain", Query: q.Query, Tier: tierName(tier), Top: top, Expect: q.Expect[0], Detail: gateDetail(resp)})
		case quarryv1.Tier_TIER_DIRECT:
			e.direct++
			// Precision reads the answer's own first source: that is what the user got.
			if slices.Contains(q.Expect, rt.Source) {
				e.directRight++
			} else {
				e.rep.Misses = append(e.rep.Misses, miss{What: "wrong direct answer", Query: q.Query, Tier: tierName(tier), Top: rt.Source, Expect: q.Expect[0], Detail: gateDetail(resp)})
			}
		}
	}
	return nil
}

// pairs asks a, then b, and records whether b was served from a's cached answer.
func (e *evaluator) pairs(ctx context.Context, c quarryv1.QueryServiceClient, qs []labelled) error {
	for _, q := range qs {
		if q.Kind != kindPair {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The same normalised question is the exact cache's business, not a pair.
		if text.Normalise(q.A) == text.Normalise(q.B) {
			e.rep.SkippedPairs++
			continue
		}
		if _, err := e.ask(ctx, c, q.A); err != nil {
			continue
		}
		resp, err := e.ask(ctx, c, q.B)
		if err != nil {
			continue
		}
		ct := resp.GetExplain().GetCache()
		outcome := scorePair(q, resp)
		if outcome == pairOther {
			// Served from another question's answer: the label says nothing about that.
			e.rep.OtherHits++
			continue
		}
		hit := outcome == pairHit
		detail := fmt.Sprintf("candidate %q similarity %.2f: %s %s", ct.GetFuzzyCandidate(), ct.GetFuzzySimilarity(), ct.GetFuzzy(), ct.GetFuzzyVerification())
		if *q.Same {
			e.rep.SamePairs++
			if hit {
				e.sameHit++
			} else {
				e.rep.Misses = append(e.rep.Misses, miss{What: "same-answer pair not served from cache", Query: q.A + " | " + q.B, Tier: tierName(resp.GetTier()), Detail: detail})
			}
		} else {
			e.rep.DifferentPairs++
			if hit {
				e.diffHit++
				e.rep.Misses = append(e.rep.Misses, miss{What: "different-answer pair served from cache", Query: q.A + " | " + q.B, Tier: tierName(resp.GetTier()), Detail: detail})
			}
		}
	}
	return nil
}

// pairOutcome is what one pair's b tells about the fuzzy cache.
type pairOutcome int

const (
	pairMiss  pairOutcome = iota // b was not served from a's cached answer
	pairHit                      // the fuzzy cache served b from a's answer
	pairOther                    // b was served from another question's answer: not scored
)

// scorePair reads how q's b was answered (resp), after q's a was asked. Only the fuzzy
// cache's decision on b against a's answer is scored: a fuzzy hit on another pair's
// question, and an exact hit (b was asked before: the same b in another pair, or
// another pair's a), say nothing about this pair's label.
func scorePair(q labelled, resp *quarryv1.QueryResponse) pairOutcome {
	switch {
	case resp.GetTier() == quarryv1.Tier_TIER_FUZZY_CACHE:
		if resp.GetExplain().GetCache().GetFuzzyCandidate() != text.Normalise(q.A) {
			return pairOther
		}
		return pairHit
	case resp.GetFromCache() || resp.GetTier() == quarryv1.Tier_TIER_EXACT_CACHE:
		return pairOther
	}
	return pairMiss
}

func (e *evaluator) finish() *evalReport {
	r := e.rep
	r.T2Precision = newRate(e.directRight, e.direct)
	r.T2Coverage = newRate(e.direct, r.KnownItems)
	r.RecallAt1 = newRate(e.at1, r.KnownItems)
	r.RecallAt5 = newRate(e.at5, r.KnownItems)
	r.OODRecall = newRate(e.ood, r.OutOfDomain)
	r.FalseOOD = newRate(e.falseOOD, r.KnownItems)
	r.FuzzyHit = newRate(e.sameHit, r.SamePairs)
	r.FuzzyWrong = newRate(e.diffHit, r.DifferentPairs)
	r.Latency = map[string]latency{}
	for t, ds := range e.lat {
		slices.Sort(ds)
		r.Latency[t] = latency{N: len(ds), P50ms: millis(quantile(ds, 0.50)), P99ms: millis(quantile(ds, 0.99))}
	}
	return r
}

// rankedPaths is the search's ranking: the gate trace's results (present also when the
// route is out of domain, so recall is still scored), else the answer's sources.
func rankedPaths(resp *quarryv1.QueryResponse) []string {
	var out []string
	if res := resp.GetExplain().GetGate().GetResults(); len(res) > 0 {
		for _, r := range res {
			out = append(out, r.GetPath())
		}
		return out
	}
	for _, s := range resp.GetSources() {
		out = append(out, s.GetPath())
	}
	return out
}

func gateDetail(resp *quarryv1.QueryResponse) string {
	g := resp.GetExplain().GetGate()
	if g == nil {
		return "answered from cache"
	}
	d := fmt.Sprintf("R top %.2f second %.2f", g.GetTopRelevance(), g.GetSecondRelevance())
	if g.GetOutOfDomainRule() != "" {
		d += "; ood: " + g.GetOutOfDomainRule()
	}
	return d + "; " + g.GetDirectDecision()
}

// quantile is the nearest-rank q-quantile of sorted durations (0 for none): the one
// percentile rule of eval, bench and the benchmarks.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func millis(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func (r *evalReport) print(w io.Writer, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "questions\t%d known-item, %d out-of-domain, %d same-answer pairs, %d different-answer pairs\n", r.KnownItems, r.OutOfDomain, r.SamePairs, r.DifferentPairs)
	var tiers []string
	for t := range r.TierMix {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	var mix []string
	for _, t := range tiers {
		mix = append(mix, fmt.Sprintf("%s %d", t, r.TierMix[t]))
	}
	fmt.Fprintf(tw, "tier mix (known + ood)\t%s\n", strings.Join(mix, ", "))
	fmt.Fprintf(tw, "T2 precision\t%s\n", r.T2Precision)
	fmt.Fprintf(tw, "T2 coverage\t%s\n", r.T2Coverage)
	fmt.Fprintf(tw, "search recall@1\t%s\n", r.RecallAt1)
	fmt.Fprintf(tw, "search recall@5\t%s\n", r.RecallAt5)
	fmt.Fprintf(tw, "out-of-domain recall\t%s\n", r.OODRecall)
	fmt.Fprintf(tw, "false out-of-domain\t%s\n", r.FalseOOD)
	fmt.Fprintf(tw, "fuzzy hit (same answer)\t%s\n", r.FuzzyHit)
	fmt.Fprintf(tw, "fuzzy wrong-hit (different)\t%s\n", r.FuzzyWrong)
	if r.OtherHits > 0 {
		fmt.Fprintf(tw, "pairs not scored\t%d: b was served from another question's answer (another pair's, or its own asked before)\n", r.OtherHits)
	}
	tiers = tiers[:0]
	for t := range r.Latency {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	for _, t := range tiers {
		l := r.Latency[t]
		fmt.Fprintf(tw, "latency %s\tp50 %.2f ms  p99 %.2f ms  (n=%d)\n", t, l.P50ms, l.P99ms, l.N)
	}
	tw.Flush()
	printPhrasings(w, r.Phrasings, verbose)
	if len(r.Misses) > 0 && !verbose {
		fmt.Fprintf(w, "%d questions counted against the router (-v lists them)\n", len(r.Misses))
	}
	if verbose {
		for _, m := range r.Misses {
			fmt.Fprintf(w, "- %s [%s] %q top=%s expect=%s %s\n", m.What, m.Tier, m.Query, m.Top, m.Expect, m.Detail)
		}
	}
}
