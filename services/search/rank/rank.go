// Package rank orders search results by the SPEC's compound score and computes the
// calibrated relevance the gates decide on.
//
// # Calibration
//
// SPEC §2 "Where the reference falls short": normalising BM25 as s/(1+s) saturates, so every
// top result of the reference scored ~0.86, the runner-up tied, and the T2 gate could not
// tell one clear answer from a crowd. Quarry keeps the compound formula
//
//	score = (0.6·R + 0.2·importance/100 + 0.2·recency) × boost(maturity)
//
// but computes R, the relevance in [0,1], from two kinds of evidence:
//
//	e_i = cov_i × s_i                      (coverage-weighted engine score)
//	R_i = cov_i^γ × e_i / (e_1 + λ·e_2)
//
// s_i is the engine score (BM25); cov_i is the idf-weighted share of the query's stems
// that document i contains exactly (prefix and typo matches do not count), with a stem
// absent from the KB weighing the most: a document that matches "rotation" but not the
// never-mentioned product name in the question is no answer, however high its BM25.
// e_1 and e_2 are the best and second-best evidence of the query (e_2 = 0 with one
// result), λ the crowding (default 0.15) and γ the coverage exponent (default 0.5). The
// ratio says how far a result stands out among the results that actually answer the
// query: a single covering result gets R = cov^γ, the top of a tie cov^γ/(1+λ) ≈
// 0.87·cov^γ, a runner-up at half the top's evidence under 0.5. γ < 1 because a reworded
// question brings words its answer does not use: measured on the example questions, γ
// 0.5 / 0.65 / 0.8 route 62 / 52 / 45 % of known-item questions to T2, all to the right
// document, while on 2,000 generated questions precision goes 98.3 / 99.2 / 99.7 %. Weighing the engine score by coverage first matters: a short folder summary
// that matches two common words of the question can out-score the one document that
// matches all of them, and must not set the scale the real answer is measured against.
//
// The compound score orders results; the gates decide on R, so a new draft file (which
// can never reach a compound 0.85) can still be the direct answer.
package rank

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

// Config holds the ranking constants of SPEC §2 "Ranking".
type Config struct {
	// RelevanceWeight, ImportanceWeight and RecencyWeight weigh R, importance/100 and
	// recency in the compound score (0.6, 0.2, 0.2).
	RelevanceWeight  float64
	ImportanceWeight float64
	RecencyWeight    float64
	// RecencyDays is the time constant of recency = e^(-days_since_update/RecencyDays) (30).
	RecencyDays float64
	// BoostCore, BoostValidated and BoostDraft multiply the score by maturity (1.15, 1.0, 0.85).
	BoostCore      float64
	BoostValidated float64
	BoostDraft     float64
	// Crowding is λ in the calibration: how much a close runner-up lowers the top's R (0.15).
	Crowding float64
	// CrowdSize is how many results, the best included, make the crowd whose evidence
	// the calibration divides by: e_1 + λ·(e_2 + … + e_K). 2 is the SPEC formula (the
	// runner-up alone). A question of common words ("how to tell if an environment
	// variable is set but empty") is contained by every long document; one of them wins
	// BM25 by a little and, measured against the runner-up alone, stands out at R ≈ 0.9
	// although ten documents hold the same evidence. Counting the crowd says so, but
	// measured it costs more than it saves: K = 5 took T2 coverage of the Go dev set from
	// 94 % to 72 % and of the held-out Go questions from 63 % to 23 % while their
	// precision stayed within a question or two, so the default stays 2.
	CrowdSize int
	// GapKeepShare keeps, through the compound-score gap filter, every result whose R is
	// at least this share of the best R (0: off). The gap filter orders by importance and
	// recency too, so it can drop the one rival that makes the top no clear answer (a
	// popular document 0.88, the right one 0.82), and the gate then sees a single
	// candidate. Evidence the gate needs must not depend on popularity.
	GapKeepShare float64
	// CoverageExponent is γ in the calibration: R grows with cov^γ (0.5). A reworded
	// question brings words the answer does not use, so a dominant document covering 80 %
	// of the question's weight is strong evidence; γ < 1 says so, γ = 1 is plain coverage.
	CoverageExponent float64
	// RelevanceFloor drops results whose R is below this share of the best R (0.1): they
	// matched a word or two and rank only on importance and recency.
	RelevanceFloor float64
	// PropagationFactor scales a match per folder level it propagates up (0.55).
	PropagationFactor float64
	// GapRatio drops results scoring below GapRatio × the top score (0.7).
	GapRatio float64
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{
		RelevanceWeight:   0.6,
		ImportanceWeight:  0.2,
		RecencyWeight:     0.2,
		RecencyDays:       30,
		BoostCore:         1.15,
		BoostValidated:    1.0,
		BoostDraft:        0.85,
		Crowding:          0.15,
		CrowdSize:         2,
		GapKeepShare:      0.8,
		CoverageExponent:  0.5,
		RelevanceFloor:    0.1,
		PropagationFactor: 0.55,
		GapRatio:          0.7,
	}
}

// RegisterFlags registers the constants with their SPEC defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.Float64Var(&c.RelevanceWeight, "rank-relevance-weight", d.RelevanceWeight, "weight of calibrated relevance R in the compound score")
	fs.Float64Var(&c.ImportanceWeight, "rank-importance-weight", d.ImportanceWeight, "weight of importance/100 in the compound score")
	fs.Float64Var(&c.RecencyWeight, "rank-recency-weight", d.RecencyWeight, "weight of recency in the compound score")
	fs.Float64Var(&c.RecencyDays, "rank-recency-days", d.RecencyDays, "time constant in days of recency = e^(-days/N)")
	fs.Float64Var(&c.BoostCore, "rank-boost-core", d.BoostCore, "score multiplier of core documents")
	fs.Float64Var(&c.BoostValidated, "rank-boost-validated", d.BoostValidated, "score multiplier of validated documents")
	fs.Float64Var(&c.BoostDraft, "rank-boost-draft", d.BoostDraft, "score multiplier of draft documents")
	fs.Float64Var(&c.Crowding, "rank-crowding", d.Crowding, "λ: how much the second-best engine score lowers every relevance")
	fs.IntVar(&c.CrowdSize, "rank-crowd-size", d.CrowdSize, "results (the best included) whose evidence, times λ past the best, divides every relevance (2: the runner-up only)")
	fs.Float64Var(&c.GapKeepShare, "rank-gap-keep-share", d.GapKeepShare, "keep through the score gap filter every result whose relevance is at least this share of the best (0: off)")
	fs.Float64Var(&c.CoverageExponent, "rank-coverage-exponent", d.CoverageExponent, "γ: relevance grows with coverage^γ (1 = plain coverage)")
	fs.Float64Var(&c.RelevanceFloor, "rank-relevance-floor", d.RelevanceFloor, "drop results whose relevance is below this share of the best relevance")
	fs.Float64Var(&c.PropagationFactor, "rank-propagation-factor", d.PropagationFactor, "score factor per folder level a match propagates to an _index.md")
	fs.Float64Var(&c.GapRatio, "rank-gap-ratio", d.GapRatio, "drop results scoring below this share of the top score")
}

// Validate rejects nonsense, naming the flag.
func (c Config) Validate() error {
	var errs []error
	nonNeg := func(name string, v float64) {
		if v < 0 || math.IsNaN(v) {
			errs = append(errs, fmt.Errorf("-%s must be >= 0, got %g", name, v))
		}
	}
	unit := func(name string, v float64) {
		if !(v >= 0 && v <= 1) {
			errs = append(errs, fmt.Errorf("-%s must be in [0,1], got %g", name, v))
		}
	}
	positive := func(name string, v float64) {
		if !(v > 0) {
			errs = append(errs, fmt.Errorf("-%s must be > 0, got %g", name, v))
		}
	}
	nonNeg("rank-relevance-weight", c.RelevanceWeight)
	nonNeg("rank-importance-weight", c.ImportanceWeight)
	nonNeg("rank-recency-weight", c.RecencyWeight)
	if c.RelevanceWeight+c.ImportanceWeight+c.RecencyWeight <= 0 {
		errs = append(errs, errors.New("-rank-relevance-weight, -rank-importance-weight and -rank-recency-weight cannot all be 0"))
	}
	positive("rank-recency-days", c.RecencyDays)
	positive("rank-boost-core", c.BoostCore)
	positive("rank-boost-validated", c.BoostValidated)
	positive("rank-boost-draft", c.BoostDraft)
	nonNeg("rank-crowding", c.Crowding)
	positive("rank-coverage-exponent", c.CoverageExponent)
	unit("rank-relevance-floor", c.RelevanceFloor)
	unit("rank-propagation-factor", c.PropagationFactor)
	unit("rank-gap-ratio", c.GapRatio)
	unit("rank-gap-keep-share", c.GapKeepShare)
	if c.CrowdSize < 1 {
		errs = append(errs, fmt.Errorf("-rank-crowd-size must be >= 1, got %d", c.CrowdSize))
	}
	return errors.Join(errs...)
}

// Candidate is one document a search returned.
type Candidate struct {
	Doc *tree.Document
	// EngineScore is the engine's relevance (BM25 for Bleve).
	EngineScore float64
	// FromEntity marks a document only the entity search found.
	FromEntity bool
	// Passage is the engine's pick of the document's best-matching passage
	// (engine.Hit.Passage), "" when it picked none.
	Passage string
}

// Signal is what the runtime has learned about a document.
type Signal struct {
	// Importance in [0,100], already decayed for idle days.
	Importance float64
	Maturity   tree.Maturity
}

// Result is a ranked document with every input of its score.
type Result struct {
	Doc         *tree.Document
	EngineScore float64
	// Coverage is the idf-weighted share of the query's stems the document contains.
	Coverage float64
	// Relevance is the calibrated R in [0,1] the gates decide on.
	Relevance float64
	// Strength is the engine score over the summed idf of the query's stems: how densely
	// the document matches, on an absolute scale R lacks (R measures a result against the
	// others of the same query only, so a weak lone match of common words gets R ≈ 1).
	// For BM25, a document of average length that holds each stem once scores about the
	// summed idf. 0 without a corpus.
	Strength float64
	// Importance (0-100), Recency (0-1) and Boost are the other inputs of Score.
	Importance float64
	Recency    float64
	Boost      float64
	// Score is the compound score; it orders results.
	Score float64
	// Propagated marks a folder summary that scored through a match below it: then Score
	// and Relevance are the child's scaled by PropagationFactor per level, and the other
	// inputs are zero.
	Propagated     bool
	PropagatedFrom string
	FromEntity     bool
	// Passage is the candidate's engine passage, carried to where excerpts are cut; ""
	// for a propagated summary (the passage is the child's text, not its own).
	Passage string
}

// Rank scores cands for a query whose search stems are stems (see QueryStems), orders them,
// propagates matches to ancestor folder summaries and drops results far below the top.
// signal returns a document's runtime importance and maturity; summary returns the
// _index.md of a folder ("" is the root) if it has one. A nil corpus counts every stem as
// covered. now is the reference time of recency.
func (c Config) Rank(now time.Time, corpus *Corpus, stems []string, cands []Candidate,
	signal func(*tree.Document) Signal, summary func(folder string) (*tree.Document, bool)) []Result {
	cands = dedupe(cands)
	if len(cands) == 0 {
		return nil
	}
	stems = Distinct(stems)
	tie := true
	for _, cd := range cands {
		if evidenceOf(cd.EngineScore) > 0 {
			tie = false
			break
		}
	}
	results := make([]Result, 0, len(cands))
	evidence := make([]float64, len(cands))
	for i, cd := range cands {
		s := evidenceOf(cd.EngineScore)
		if tie {
			// The engine did not rank (every score zero): all results tie.
			s = 1
		}
		cov := 1.0
		if corpus != nil {
			cov = corpus.coverage(cd.Doc.Path, stems)
		}
		evidence[i] = cov * s
		results = append(results, Result{Doc: cd.Doc, EngineScore: cd.EngineScore, Coverage: cov, FromEntity: cd.FromEntity, Passage: cd.Passage})
	}
	var idfSum float64
	if corpus != nil {
		for _, st := range stems {
			idfSum += corpus.IDF(st)
		}
	}
	e1, crowd := c.crowd(evidence)
	for i := range results {
		r := &results[i]
		if e1 > 0 {
			r.Relevance = math.Pow(r.Coverage, c.CoverageExponent) * evidence[i] / (e1 + c.Crowding*crowd)
		}
		if idfSum > 0 {
			// evidenceOf, not max(·, 0): Go's max passes NaN, and a NaN or infinite
			// Strength passed the gate's DirectMinStrength check (NaN < x is false).
			r.Strength = evidenceOf(r.EngineScore) / idfSum
		}
		sig := signal(r.Doc)
		r.Importance = min(max(sig.Importance, 0), 100)
		if math.IsNaN(r.Importance) {
			// min and max pass NaN too: a NaN score sorted anywhere and made the gap
			// filter's floor NaN, which dropped every result but the most relevant.
			r.Importance = 0
		}
		r.Recency = c.recency(now, r.Doc.Updated)
		r.Boost = c.boost(sig.Maturity)
		r.Score = c.compound(r.Relevance, r.Importance, r.Recency, r.Boost)
	}
	results = c.propagate(results, summary)
	sortResults(results)
	return c.gapFilter(results)
}

// compound returns the SPEC compound score of its inputs.
func (c Config) compound(relevance, importance, recency, boost float64) float64 {
	return (c.RelevanceWeight*relevance + c.ImportanceWeight*importance/100 + c.RecencyWeight*recency) * boost
}

func (c Config) recency(now, updated time.Time) float64 {
	if updated.IsZero() {
		return 0
	}
	days := now.Sub(updated).Hours() / 24
	if days < 0 {
		// Clock skew or a future "updated": as fresh as it gets.
		days = 0
	}
	return math.Exp(-days / c.RecencyDays)
}

func (c Config) boost(m tree.Maturity) float64 {
	switch m {
	case tree.Core:
		return c.BoostCore
	case tree.Validated:
		return c.BoostValidated
	default:
		return c.BoostDraft
	}
}

// propagate adds, for each folder with a summary above a direct result, the best child's
// score scaled by PropagationFactor per level; a summary that is itself a direct result
// keeps whichever scores better.
func (c Config) propagate(results []Result, summary func(string) (*tree.Document, bool)) []Result {
	if summary == nil || c.PropagationFactor == 0 {
		return results
	}
	best := map[string]Result{} // summary path → best propagated result
	for _, r := range results {
		folder := r.Doc.Folder()
		if r.Doc.Summary {
			// A summary describes its own folder: its first ancestor is the parent.
			if folder == "" {
				continue
			}
			folder = parent(folder)
		}
		factor := 1.0
		for {
			factor *= c.PropagationFactor
			if s, ok := summary(folder); ok && s != nil && s.Path != r.Doc.Path {
				p := Result{
					Doc:            s,
					Relevance:      r.Relevance * factor,
					Strength:       r.Strength * factor,
					Score:          r.Score * factor,
					Propagated:     true,
					PropagatedFrom: r.Doc.Path,
				}
				if old, seen := best[s.Path]; !seen || better(p, old) {
					best[s.Path] = p
				}
			}
			if folder == "" {
				break
			}
			folder = parent(folder)
		}
	}
	if len(best) == 0 {
		return results
	}
	for i, r := range results {
		if p, ok := best[r.Doc.Path]; ok {
			if better(p, r) {
				results[i] = p
			}
			delete(best, r.Doc.Path)
		}
	}
	for _, p := range best {
		results = append(results, p)
	}
	return results
}

func parent(folder string) string {
	if i := strings.LastIndexByte(folder, '/'); i >= 0 {
		return folder[:i]
	}
	return ""
}

// better orders results: Score, then Relevance, then path, so ties resolve the same way
// every time.
func better(a, b Result) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	if a.Relevance != b.Relevance {
		return a.Relevance > b.Relevance
	}
	if a.Doc.Path != b.Doc.Path {
		return a.Doc.Path < b.Doc.Path
	}
	return a.PropagatedFrom < b.PropagatedFrom
}

func sortResults(rs []Result) {
	slices.SortFunc(rs, func(a, b Result) int {
		switch {
		case better(a, b):
			return -1
		case better(b, a):
			return 1
		}
		return 0
	})
}

func (c Config) gapFilter(rs []Result) []Result {
	if len(rs) == 0 {
		return rs
	}
	floor := c.GapRatio * rs[0].Score
	allBestR := 0.0
	for _, r := range rs {
		allBestR = max(allBestR, r.Relevance)
	}
	rival := func(r Result) bool {
		return c.GapKeepShare > 0 && r.Relevance >= c.GapKeepShare*allBestR-1e-12
	}
	kept := rs[:0]
	for _, r := range rs {
		if r.Score >= floor || rival(r) {
			kept = append(kept, r)
		}
	}
	rs = kept
	// With little relevance at the top, importance and recency alone can keep a result
	// above the score gap; the relevance floor drops those.
	bestR := 0.0
	for _, r := range rs {
		bestR = max(bestR, r.Relevance)
	}
	out := rs[:0]
	for _, r := range rs {
		if r.Relevance >= c.RelevanceFloor*bestR {
			out = append(out, r)
		}
	}
	return out
}

// dedupe keeps one candidate per path with its best engine score; it is an entity-search
// result only if every search that found it was an entity search, and keeps the first
// passage an engine picked for it.
func dedupe(cands []Candidate) []Candidate {
	out := make([]Candidate, 0, len(cands))
	at := make(map[string]int, len(cands))
	for _, cd := range cands {
		if cd.Doc == nil {
			continue
		}
		i, dup := at[cd.Doc.Path]
		if !dup {
			at[cd.Doc.Path] = len(out)
			out = append(out, cd)
			continue
		}
		out[i].EngineScore = max(out[i].EngineScore, cd.EngineScore)
		out[i].FromEntity = out[i].FromEntity && cd.FromEntity
		if out[i].Passage == "" {
			out[i].Passage = cd.Passage
		}
	}
	return out
}

// crowd returns the best evidence and the sum of the next CrowdSize-1 (0 when absent).
func (c Config) crowd(xs []float64) (first, rest float64) {
	if c.CrowdSize == 2 {
		return topTwo(xs)
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b float64) int { return cmp.Compare(b, a) })
	if len(s) == 0 {
		return 0, 0
	}
	for _, x := range s[1:min(len(s), c.CrowdSize)] {
		rest += x
	}
	return s[0], rest
}

// topTwo returns the largest and second-largest of xs (0 when absent).
func topTwo(xs []float64) (first, second float64) {
	for _, x := range xs {
		switch {
		case x > first:
			first, second = x, first
		case x > second:
			second = x
		}
	}
	return first, second
}

// evidenceOf is the part of an engine score that counts as evidence: a positive,
// finite score. NaN passed max(·, 0) (Go's max returns it), an infinite score took
// every other result's calibrated relevance to zero, and with either the sort and the
// gap cut broke; both come only from a backend's bug, and count as no evidence.
func evidenceOf(score float64) float64 {
	if !(score > 0) || math.IsInf(score, 1) {
		return 0
	}
	return score
}
