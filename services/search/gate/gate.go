// Package gate decides where a question goes: out of domain, a direct answer from the
// documents (T2), one LLM call (T3) or the agentic loop (T4), and when to run entity search.
//
// Every decision rests on the calibrated relevance R of package rank, never on the compound
// score, which orders results but mixes in importance, recency and maturity (a new draft
// file can never reach a compound 0.85). See the rank package comment.
package gate

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/lexicon"
	"github.com/quarry-router/quarry/services/search/rank"
)

// Config holds the gate thresholds of SPEC §2 (out of domain, entity search, T2, T3).
type Config struct {
	// DirectMin is the relevance the top result needs for a direct answer (0.85).
	DirectMin float64
	// DirectHigh lets a direct answer pass whatever the runner-up scores (0.93).
	DirectHigh float64
	// DirectGap is the lead over the runner-up that lets a direct answer pass (0.08).
	DirectGap float64
	// PrefetchMin is the relevance a result needs to be an answer candidate: in the direct
	// answer, in the T3 prompt, and to send a question to T3 rather than T4 (0.7).
	PrefetchMin float64
	// DirectMaxDocs caps the documents of a direct answer or a T3 prompt (5).
	DirectMaxDocs int
	// DirectLead: a direct answer needs its first result, the source it names first, to
	// be the one with the top relevance. Results are ordered by the compound score, which
	// weighs importance and recency too, so a popular document of R 0.69 can lead while
	// the gate passes on another's 0.89: the answer would then name the wrong document.
	DirectLead bool
	// DirectMinStrength is the rank.Result Strength (engine score over the query's summed
	// idf) the top result needs for a direct answer (0: off). R compares results of one
	// query with each other, so a long document that holds every common word of the
	// question once ("how to tell if an environment variable is set but empty" in
	// net/http) stands alone at R 0.92 on a BM25 score a tenth of a real answer's. The
	// scale is the engine's: measured for Bleve's BM25 only, where 0.01 took T2 precision
	// on held-out Go questions from 67 / 82 % to 77 / 94 % but the example set's T2
	// coverage under SPEC's 60 % (55 %), hence off by default.
	DirectMinStrength float64

	// OODMinFiles is the KB size from which a low best relevance means out of domain (50).
	OODMinFiles int
	// OODMinRelevance is that low relevance (0.45).
	OODMinRelevance float64
	// OODAllTermsMax: when the all-terms search found nothing and the best relevance is
	// below this (0.85), a query term that no top result contains means out of domain.
	OODAllTermsMax float64
	// OODTermMinLen is the shortest query word (characters) that rule and unfamiliar_words
	// count (3, where SPEC says 4+, deliberately): a name of three letters ("ssh", "gpt", "php") is as foreign to a KB that
	// never uses it as a long one, and so is an everyday word ("my dog"); two letters are
	// mostly abbreviations and typing ("ok", "gz").
	OODTermMinLen int
	// OODTopK is how many top results that rule looks at (10).
	OODTopK int
	// OODWrittenNames: a word the question writes like a name (OODInput.Written) that the
	// KB never uses makes the question out of domain even when the all-terms search
	// matched: the word is in no document, so that match was the engine's prefix or typo
	// match ("React" typo-matches "read", "Serde" "serve"), which is no evidence (SPEC §2).
	// A mistyped word is not written like a name, so typos keep the all-terms protection.
	OODWrittenNames bool
	// OODWrittenNameMax: such a name counts while the best relevance is below this (0.85).
	OODWrittenNameMax float64
	// OODWrittenNameMinLen is the shortest name (characters) that counts (2): a name
	// written as one ("Qt", "Vue") is a name however short, while a short lower-case word
	// is often an abbreviation the KB spells out, hence OODTermMinLen.
	OODWrittenNameMinLen int
	// OODUnfamiliarShare: everyday words the KB never uses make a question out of domain
	// when they are at least this share of its words (0.4): two in five ("what does the
	// error light on my washing machine mean"). No in-domain question of the example,
	// dev or held-out sets has two such words; a reworded one brings one ("how OFTEN do
	// backups run"). At 1/3 or below, one synonym the KB lacks in three words ("which
	// permission scope should I use") would be out of domain.
	OODUnfamiliarShare float64
	// OODUnfamiliarAllTerms: unfamiliar_words runs even when the all-terms search matched.
	// A word the KB never uses can only have matched by typo or prefix ("dress" matches
	// "address"), which is no evidence that the KB covers it.
	OODUnfamiliarAllTerms bool
	// OODLabelNames: the words of a short leading label ("Rails: how to ...") are written
	// like names (lexicon.Writing.Label).
	OODLabelNames bool
	// OODQualifiedNames: the parts of a qualified identifier ("torch.nn.Module") are
	// written like names (lexicon.Writing.Qualified).
	OODQualifiedNames bool
	// OODRareNameShare: a word the question writes like a name (OODInput.Written) that
	// the KB uses in at most this share of its documents (0.05; at least one) and that no
	// top result contains makes the question out of domain when unmatched_term could fire
	// (no all-terms match, best relevance below OODAllTermsMax): a KB mentions other
	// products in passing ("unlike Java, ...") without covering them, and the question
	// "How do I marshal a protobuf message in Java?" finds no answer that names Java.
	// 0 turns the rule (rare_name) off.
	OODRareNameShare float64
	// OODSubjectCoverage: when the head of a noun phrase of the question ("my DOG", "the
	// office front DOOR", "a MOTORCYCLE") is a word the KB never uses, the question is out
	// of domain unless some top result holds at least this idf-weighted share of all its
	// words (0.5), the never-used ones counted too. Ranking drops everyday words the KB
	// never uses from its evidence, since a reworded question brings some, so "can I
	// bring my dog to the office" ranks on "office" alone at full relevance; the head of
	// a noun phrase is what the question is about, not a rewording. Only the head: a
	// modifier the KB lacks ("a new PERMISSION scope") is a rewording of a KB noun.
	// 0 turns the rule (uncovered_subject) off.
	OODSubjectCoverage float64
	// OODTypos: a lower-case word no dictionary has that is one edit from a word the KB
	// uses ("transacton", "bufferd") is that word mistyped, not a name the KB lacks
	// (lexicon.Typo); the resolver passes the corrected word to ranking and to these rules.
	OODTypos bool
	// OODLiterals: words the question quotes ("Atoi fails on \"12abc\"") and its numbers
	// ("ticket 4711", "v2") are the user's data, which no KB holds: no rule counts them,
	// and when the KB never uses them ranking does not weigh them nor the search look
	// for them (lexicon.Literals).
	OODLiterals bool

	// EntityTrigger: entity search runs when the first search returns fewer results (3).
	EntityTrigger int
	// EntityMinLen is the shortest word (characters) entity search uses (3).
	EntityMinLen int
	// EntityMaxTerms is how many words entity search uses (3).
	EntityMaxTerms int
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{
		DirectMin:             0.85,
		DirectHigh:            0.93,
		DirectGap:             0.08,
		PrefetchMin:           0.7,
		DirectMaxDocs:         5,
		DirectLead:            true,
		OODMinFiles:           50,
		OODMinRelevance:       0.45,
		OODAllTermsMax:        0.85,
		OODTermMinLen:         3,
		OODTopK:               10,
		OODWrittenNames:       true,
		OODWrittenNameMax:     0.85,
		OODWrittenNameMinLen:  2,
		OODUnfamiliarShare:    0.4,
		OODUnfamiliarAllTerms: true,
		OODLabelNames:         true,
		OODQualifiedNames:     true,
		OODRareNameShare:      0.05,
		OODSubjectCoverage:    0.5,
		OODTypos:              true,
		OODLiterals:           true,
		EntityTrigger:         3,
		EntityMinLen:          3,
		EntityMaxTerms:        3,
	}
}

// RegisterFlags registers the thresholds with their SPEC defaults, except
// -gate-ood-term-min-len (see OODTermMinLen).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.Float64Var(&c.DirectMin, "gate-direct-min", d.DirectMin, "T2: relevance the top result needs")
	fs.Float64Var(&c.DirectHigh, "gate-direct-high", d.DirectHigh, "T2: top relevance that passes whatever the runner-up")
	fs.Float64Var(&c.DirectGap, "gate-direct-gap", d.DirectGap, "T2: lead over the runner-up that passes")
	fs.Float64Var(&c.PrefetchMin, "gate-prefetch-min", d.PrefetchMin, "relevance of an answer candidate (T2 documents, T3 prompt, T3 vs T4)")
	fs.BoolVar(&c.DirectLead, "gate-direct-lead", d.DirectLead, "T2: the first result must be the one with the top relevance")
	fs.Float64Var(&c.DirectMinStrength, "gate-direct-min-strength", d.DirectMinStrength, "T2: engine score over the query's summed idf the top result needs (0: off; engine-specific scale)")
	fs.IntVar(&c.DirectMaxDocs, "gate-direct-max-docs", d.DirectMaxDocs, "documents in a direct answer or a T3 prompt")
	fs.IntVar(&c.OODMinFiles, "gate-ood-min-files", d.OODMinFiles, "out of domain: KB size from which low relevance counts")
	fs.Float64Var(&c.OODMinRelevance, "gate-ood-min-relevance", d.OODMinRelevance, "out of domain: best relevance below this in a large KB")
	fs.Float64Var(&c.OODAllTermsMax, "gate-ood-all-terms-max", d.OODAllTermsMax, "out of domain: best relevance below which an unmatched term counts")
	fs.IntVar(&c.OODTermMinLen, "gate-ood-term-min-len", d.OODTermMinLen, "out of domain: shortest query word (characters) that must match")
	fs.IntVar(&c.OODTopK, "gate-ood-top-k", d.OODTopK, "out of domain: top results searched for each query word")
	fs.BoolVar(&c.OODWrittenNames, "gate-ood-written-names", d.OODWrittenNames, "out of domain: a word written like a name that the KB never uses counts even when the all-terms search matched")
	fs.Float64Var(&c.OODWrittenNameMax, "gate-ood-written-name-max", d.OODWrittenNameMax, "out of domain: best relevance below which a word written like a name that the KB never uses counts")
	fs.IntVar(&c.OODWrittenNameMinLen, "gate-ood-written-name-min-len", d.OODWrittenNameMinLen, "out of domain: shortest word written like a name (characters) that counts")
	fs.Float64Var(&c.OODUnfamiliarShare, "gate-ood-unfamiliar-share", d.OODUnfamiliarShare, "out of domain: share of a question's words that, as everyday words the KB never uses, make it out of domain")
	fs.BoolVar(&c.OODUnfamiliarAllTerms, "gate-ood-unfamiliar-all-terms", d.OODUnfamiliarAllTerms, "out of domain: everyday words the KB never uses count even when the all-terms search matched (by typo or prefix)")
	fs.BoolVar(&c.OODLabelNames, "gate-ood-label-names", d.OODLabelNames, `out of domain: the words of a short leading label ("Rails: how to ...") are written like names`)
	fs.BoolVar(&c.OODQualifiedNames, "gate-ood-qualified-names", d.OODQualifiedNames, `out of domain: the parts of a qualified identifier ("torch.nn.Module") are written like names`)
	fs.Float64Var(&c.OODRareNameShare, "gate-ood-rare-name-share", d.OODRareNameShare, "out of domain: a word written like a name that at most this share of the KB's documents use and no top result contains counts like a name the KB never uses (0: off)")
	fs.Float64Var(&c.OODSubjectCoverage, "gate-ood-subject-coverage", d.OODSubjectCoverage, "out of domain: when a noun phrase's head is a word the KB never uses, the idf-weighted share of the question's words some top result must hold (0: off)")
	fs.BoolVar(&c.OODTypos, "gate-ood-typos", d.OODTypos, `out of domain: a lower-case non-dictionary word one edit from a KB word is that word mistyped ("transacton"), not an unknown name`)
	fs.BoolVar(&c.OODLiterals, "gate-ood-literals", d.OODLiterals, `out of domain: words in double quotes or backticks, numbers and versions (v2) are the user's data, counted by no rule`)
	fs.IntVar(&c.EntityTrigger, "gate-entity-trigger", d.EntityTrigger, "entity search runs below this many results")
	fs.IntVar(&c.EntityMinLen, "gate-entity-min-len", d.EntityMinLen, "entity search: shortest word (characters)")
	fs.IntVar(&c.EntityMaxTerms, "gate-entity-max-terms", d.EntityMaxTerms, "entity search: words searched")
}

// Validate rejects nonsense, naming the flag.
func (c Config) Validate() error {
	var errs []error
	unit := func(name string, v float64) {
		if !(v >= 0 && v <= 1) {
			errs = append(errs, fmt.Errorf("-%s must be in [0,1], got %g", name, v))
		}
	}
	atLeast := func(name string, v, lo int) {
		if v < lo {
			errs = append(errs, fmt.Errorf("-%s must be >= %d, got %d", name, lo, v))
		}
	}
	unit("gate-direct-min", c.DirectMin)
	unit("gate-direct-high", c.DirectHigh)
	unit("gate-direct-gap", c.DirectGap)
	unit("gate-prefetch-min", c.PrefetchMin)
	if !(c.DirectMinStrength >= 0) {
		errs = append(errs, fmt.Errorf("-gate-direct-min-strength must be >= 0, got %g", c.DirectMinStrength))
	}
	unit("gate-ood-min-relevance", c.OODMinRelevance)
	unit("gate-ood-all-terms-max", c.OODAllTermsMax)
	unit("gate-ood-written-name-max", c.OODWrittenNameMax)
	unit("gate-ood-unfamiliar-share", c.OODUnfamiliarShare)
	unit("gate-ood-rare-name-share", c.OODRareNameShare)
	unit("gate-ood-subject-coverage", c.OODSubjectCoverage)
	if c.DirectHigh < c.DirectMin {
		errs = append(errs, fmt.Errorf("-gate-direct-high (%g) must be >= -gate-direct-min (%g)", c.DirectHigh, c.DirectMin))
	}
	if c.PrefetchMin > c.DirectMin {
		errs = append(errs, fmt.Errorf("-gate-prefetch-min (%g) must be <= -gate-direct-min (%g)", c.PrefetchMin, c.DirectMin))
	}
	atLeast("gate-direct-max-docs", c.DirectMaxDocs, 1)
	atLeast("gate-ood-min-files", c.OODMinFiles, 0)
	atLeast("gate-ood-term-min-len", c.OODTermMinLen, 1)
	atLeast("gate-ood-top-k", c.OODTopK, 1)
	atLeast("gate-ood-written-name-min-len", c.OODWrittenNameMinLen, 1)
	atLeast("gate-entity-trigger", c.EntityTrigger, 0)
	atLeast("gate-entity-min-len", c.EntityMinLen, 1)
	atLeast("gate-entity-max-terms", c.EntityMaxTerms, 0)
	return errors.Join(errs...)
}

// Thresholds returns the thresholds in force by name, for the routing trace: every
// -gate-* flag without the prefix and with underscores, switches as 0 or 1.
func (c Config) Thresholds() map[string]float64 {
	return map[string]float64{
		"direct_min":               c.DirectMin,
		"direct_high":              c.DirectHigh,
		"direct_gap":               c.DirectGap,
		"prefetch_min":             c.PrefetchMin,
		"direct_max_docs":          float64(c.DirectMaxDocs),
		"direct_lead":              b2f(c.DirectLead),
		"direct_min_strength":      c.DirectMinStrength,
		"ood_min_files":            float64(c.OODMinFiles),
		"ood_min_relevance":        c.OODMinRelevance,
		"ood_all_terms_max":        c.OODAllTermsMax,
		"ood_term_min_len":         float64(c.OODTermMinLen),
		"ood_top_k":                float64(c.OODTopK),
		"ood_written_names":        b2f(c.OODWrittenNames),
		"ood_written_name_max":     c.OODWrittenNameMax,
		"ood_written_name_min_len": float64(c.OODWrittenNameMinLen),
		"ood_unfamiliar_share":     c.OODUnfamiliarShare,
		"ood_unfamiliar_all_terms": b2f(c.OODUnfamiliarAllTerms),
		"ood_label_names":          b2f(c.OODLabelNames),
		"ood_qualified_names":      b2f(c.OODQualifiedNames),
		"ood_rare_name_share":      c.OODRareNameShare,
		"ood_subject_coverage":     c.OODSubjectCoverage,
		"ood_typos":                b2f(c.OODTypos),
		"ood_literals":             b2f(c.OODLiterals),
		"entity_trigger":           float64(c.EntityTrigger),
		"entity_min_len":           float64(c.EntityMinLen),
		"entity_max_terms":         float64(c.EntityMaxTerms),
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Writing returns the ways of writing a word, besides capitals, that make it a name.
func (c Config) Writing() lexicon.Writing {
	return lexicon.Writing{Label: c.OODLabelNames, Qualified: c.OODQualifiedNames}
}

// NeedEntitySearch reports whether a first search with n results calls for entity search.
func (c Config) NeedEntitySearch(n int) bool { return n < c.EntityTrigger }

// EntityTerms returns the words entity search runs, one search each: the query's words that
// are not stop words and have at least EntityMinLen characters, the first EntityMaxTerms of
// them, without repeats.
func (c Config) EntityTerms(words []string) []string {
	var out []string
	for _, w := range words {
		if len(out) == c.EntityMaxTerms {
			break
		}
		if utf8.RuneCountInString(w) < c.EntityMinLen || text.IsStopWord(w) || slices.Contains(out, w) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// Out-of-domain rule names, as reported in the routing trace and metrics.
const (
	RuleNoResults     = "no_results"
	RuleLowRelevance  = "low_relevance"
	RuleUnmatchedTerm = "unmatched_term"
	// RuleUnfamiliarWords refines unmatched_term: most of the question is everyday words
	// the KB never uses ("how do I rotate the tires on my car").
	RuleUnfamiliarWords = "unfamiliar_words"
	// RuleRareName: a name the KB mentions in passing but no top result contains
	// (OODRareNameShare).
	RuleRareName = "rare_name"
	// RuleUncoveredSubject: what the question is about is a word the KB never uses and
	// no top result holds most of the question (OODSubjectCoverage).
	RuleUncoveredSubject = "uncovered_subject"
)

// OODInput is what the out-of-domain rules look at.
type OODInput struct {
	// Results are the ranked results (after propagation and the gap filter), best first.
	Results []rank.Result
	// Files is the number of documents in the KB.
	Files int
	// AllTermsMatched is true when the all-terms search found something (no fallback).
	AllTermsMatched bool
	// Terms are the query's search words (lower case); stop words are ignored.
	Terms []string
	// Contains reports whether a document contains a stem exactly (rank.Corpus.Contains).
	// Without it the unmatched-term rule cannot run.
	Contains func(path, stem string) bool
	// InKB reports whether any document of the KB contains a stem. When set, an unmatched
	// word counts only if the KB never uses it: a word the KB knows but the top results
	// lack ("configure", "settings") is a rewording, not a topic the KB lacks, whereas a
	// name it never mentions ("kafka") is.
	InKB func(stem string) bool
	// IsName reports whether an unmatched word the KB never uses is a name (a product,
	// a tool) rather than an everyday word. A name the KB never mentions makes the
	// question out of domain on its own; everyday words only when they are at least half
	// of the question's words, since a reworded question brings one or two of its own.
	// Nil counts every such word as a name.
	IsName func(word string) bool
	// Written reports whether the question writes a word like a name: capitalised inside
	// the question, in a leading label, as part of a qualified identifier
	// (lexicon.NamesWith). Such a word is a name whatever the dictionary says ("Rails",
	// "React"); see OODWrittenNames. Nil: no word is.
	Written func(word string) bool
	// Words are all the question's words in order, stop words included (lower case, the
	// typos of OODTypos corrected like Terms): the noun phrases of uncovered_subject start
	// at a determiner or a preposition. Nil: that rule does not run.
	Words []string
	// DF returns the number of documents of the KB that contain a stem. Nil: rare_name
	// does not run.
	DF func(stem string) int
	// IDF returns the inverse document frequency of a stem (rank.Corpus.IDF; the highest
	// for a stem the KB never uses). Nil: uncovered_subject does not run.
	IDF func(stem string) float64
	// Literal reports whether the question quotes a word as data ("12abc" in `Atoi fails
	// on "12abc"`): the user's value, which no KB holds and no rule counts
	// (lexicon.Literals). Nil: no word is.
	Literal func(word string) bool
}

// OutOfDomain applies SPEC §2's out-of-domain rules in order and returns the first that
// fires:
//   - no_results: the searches found nothing;
//   - low_relevance: the KB has at least OODMinFiles files and the best relevance R is
//     below OODMinRelevance (SPEC states it on the compound score; R is the calibrated
//     evidence, and a compound score is never below 0.45 only for lack of importance);
//   - unmatched_term: the all-terms search found nothing, the best R is below
//     OODAllTermsMax, and some query word of OODTermMinLen+ characters is, as an exact stem,
//     in none of the top OODTopK results. Exact, because the engine's prefix and typo
//     matches always find something ("are" prefix-matches "arecord"): they are not
//     evidence that the KB covers the word. A word the KB uses elsewhere does not count
//     (a rewording), and an everyday word only through unfamiliar_words (see IsName).
//     A word the question writes like a name (Written: "Can React ...", "Rails: ...",
//     "torch.nn") of OODWrittenNameMinLen+ characters that the KB never uses counts even
//     after an all-terms match, below OODWrittenNameMax (OODWrittenNames): the question's
//     author named something the KB does not know, whatever the dictionary says;
//   - unfamiliar_words: everyday words the KB never uses are at least OODUnfamiliarShare
//     of the question's words (after an all-terms match too with OODUnfamiliarAllTerms);
//   - rare_name: under the conditions of unmatched_term, a written name that few
//     documents use and no top result contains (OODRareNameShare);
//   - uncovered_subject: the head of a noun phrase is a word the KB never uses and no top
//     result holds OODSubjectCoverage of the question's words (OODSubjectCoverage).
//
// Words the question quotes as data (Literal) count in no rule.
func (c Config) OutOfDomain(in OODInput) (rule string, ood bool) {
	if len(in.Results) == 0 {
		return RuleNoResults, true
	}
	best := bestTwo(in.Results)[0]
	if in.Files >= c.OODMinFiles && best < c.OODMinRelevance {
		return RuleLowRelevance, true
	}
	literal := func(w string) bool { return in.Literal != nil && in.Literal(w) }
	if c.OODWrittenNames && in.Written != nil && in.InKB != nil && best < c.OODWrittenNameMax {
		for _, w := range in.Terms {
			if utf8.RuneCountInString(w) >= c.OODWrittenNameMinLen && !text.IsStopWord(w) && !literal(w) && in.Written(w) && !in.InKB(text.Stem(w)) {
				return RuleUnmatchedTerm, true
			}
		}
	}
	top := in.Results[:min(len(in.Results), c.OODTopK)]
	inTop := func(stem string) bool {
		return slices.ContainsFunc(top, func(r rank.Result) bool { return in.Contains(r.Doc.Path, stem) })
	}
	// unmatched_term and rare_name only where the all-terms search found nothing and no
	// result is a clear answer.
	unmatched := !in.AllTermsMatched && best < c.OODAllTermsMax
	if in.Contains != nil && (!in.AllTermsMatched || c.OODUnfamiliarAllTerms) {
		unfamiliar := 0
		for _, w := range in.Terms {
			if utf8.RuneCountInString(w) < c.OODTermMinLen || text.IsStopWord(w) || literal(w) {
				continue
			}
			stem := text.Stem(w)
			if inTop(stem) {
				continue
			}
			if in.InKB != nil && in.InKB(stem) {
				continue
			}
			if in.IsName == nil || in.IsName(w) {
				if unmatched {
					return RuleUnmatchedTerm, true
				}
				continue
			}
			unfamiliar++
		}
		// Not gated on relevance: everyday words the KB never uses carry no weight in
		// coverage, so the rest of the question can match perfectly ("rotate" in "how do
		// I rotate the tires on the company car").
		if unfamiliar > 0 && float64(unfamiliar) >= c.OODUnfamiliarShare*float64(contentWords(in.Terms, literal))-1e-9 {
			return RuleUnfamiliarWords, true
		}
	}
	if c.OODRareNameShare > 0 && unmatched && in.Contains != nil && in.Written != nil && in.DF != nil {
		most := max(1, int(c.OODRareNameShare*float64(in.Files)))
		for _, w := range in.Terms {
			if utf8.RuneCountInString(w) < c.OODWrittenNameMinLen || text.IsStopWord(w) || literal(w) || !in.Written(w) {
				continue
			}
			stem := text.Stem(w)
			if df := in.DF(stem); df > 0 && df <= most && !inTop(stem) {
				return RuleRareName, true
			}
		}
	}
	if c.OODSubjectCoverage > 0 && in.Contains != nil && in.InKB != nil && in.IDF != nil && in.Words != nil {
		if c.uncoveredSubject(in, top, literal) {
			return RuleUncoveredSubject, true
		}
	}
	return "", false
}

// phraseStarts are the words after which the next run of content words is a noun phrase:
// determiners and possessives ("my dog", "the office front door") and prepositions ("with
// pandas", "for my desk").
var phraseStarts = map[string]bool{
	"a": true, "an": true, "the": true, "my": true, "our": true, "your": true, "their": true,
	"his": true, "her": true, "its": true, "this": true, "that": true, "these": true,
	"those": true, "another": true, "some": true, "any": true, "every": true, "each": true,
	"about": true, "for": true, "in": true, "on": true, "with": true, "from": true,
	"into": true, "of": true, "at": true, "by": true, "to": true, "during": true,
	"between": true, "against": true, "through": true, "over": true, "under": true,
}

// uncoveredSubject reports whether a noun phrase of the question ends in a word the KB
// never uses while no top result holds OODSubjectCoverage of the question's words.
func (c Config) uncoveredSubject(in OODInput, top []rank.Result, literal func(string) bool) bool {
	subject := false
	for i := 0; i < len(in.Words) && !subject; i++ {
		if !phraseStarts[in.Words[i]] {
			continue
		}
		j := i + 1
		for j < len(in.Words) && !text.IsStopWord(in.Words[j]) {
			j++
		}
		// The user's data after a noun ("a driving licence (#4711)", "the API in v2")
		// is not its head.
		h := j - 1
		for h > i && literal(in.Words[h]) {
			h--
		}
		if h == i {
			i = j - 1
			continue
		}
		head := in.Words[h]
		subject = utf8.RuneCountInString(head) >= c.OODTermMinLen &&
			strings.IndexFunc(head, unicode.IsLetter) >= 0 && !in.InKB(text.Stem(head))
		i = j - 1
	}
	if !subject {
		return false
	}
	var stems []string
	for _, w := range in.Terms {
		if !text.IsStopWord(w) && !literal(w) {
			stems = append(stems, text.Stem(w))
		}
	}
	stems = rank.Distinct(stems)
	var total float64
	for _, s := range stems {
		total += in.IDF(s)
	}
	if total <= 0 {
		return false
	}
	for _, r := range top {
		var have float64
		for _, s := range stems {
			if in.Contains(r.Doc.Path, s) {
				have += in.IDF(s)
			}
		}
		if have/total >= c.OODSubjectCoverage-1e-9 {
			return false
		}
	}
	return true
}

// contentWords counts the words of a question that carry meaning.
func contentWords(terms []string, literal func(string) bool) int {
	n := 0
	for _, w := range terms {
		if !text.IsStopWord(w) && !literal(w) {
			n++
		}
	}
	return n
}

// Route is where a question goes.
type Route int

// Routes, fastest first. The zero Route is unset.
const (
	OutOfDomain Route = iota + 1
	Direct
	SingleLLM
	Agentic
)

// String returns the route's name as metrics and traces spell it.
func (r Route) String() string {
	switch r {
	case OutOfDomain:
		return "out_of_domain"
	case Direct:
		return "direct"
	case SingleLLM:
		return "single_llm"
	case Agentic:
		return "agentic"
	default:
		return "unspecified"
	}
}

// Decision is a routing decision and the evidence it rests on.
type Decision struct {
	Route Route
	// Pass reports whether the T2 gate passed.
	Pass bool
	// Reason says which rule decided, in words.
	Reason string
	// Top and Second are the best and second-best relevance among the answer candidates
	// (0 when absent).
	Top, Second float64
}

// Direct applies the T2 gate (SPEC §2 "T2 direct answer") to the calibrated relevance of
// the answer candidates (R >= PrefetchMin): it passes when the top R >= DirectMin and there
// is only one candidate, or the top R >= DirectHigh, or the top leads the second by
// DirectGap or more. The returned Route is Direct when it passes and unset otherwise.
func (c Config) Direct(results []rank.Result) Decision {
	cands := c.candidates(results)
	if len(cands) == 0 {
		top := 0.0
		if len(results) > 0 {
			top = bestTwo(results)[0]
		}
		return Decision{Top: top, Reason: fmt.Sprintf("no result with relevance >= %.2f (top %.2f)", c.PrefetchMin, top)}
	}
	b := bestTwo(cands)
	d := Decision{Top: b[0], Second: b[1]}
	gap := d.Top - d.Second
	switch {
	case d.Top < c.DirectMin:
		d.Reason = fmt.Sprintf("top %.2f < %.2f", d.Top, c.DirectMin)
	case c.DirectMinStrength > 0 && topStrength(cands) < c.DirectMinStrength:
		d.Reason = fmt.Sprintf("top strength %.3f < %.3f", topStrength(cands), c.DirectMinStrength)
	case c.DirectLead && results[0].Relevance < d.Top-1e-9:
		d.Reason = fmt.Sprintf("first result %s has relevance %.2f < top %.2f", results[0].Doc.Path, results[0].Relevance, d.Top)
	case len(cands) == 1:
		d.Pass, d.Reason = true, fmt.Sprintf("single result above %.2f (top %.2f)", c.DirectMin, d.Top)
	case d.Top >= c.DirectHigh:
		d.Pass, d.Reason = true, fmt.Sprintf("top %.2f >= %.2f", d.Top, c.DirectHigh)
	case gap >= c.DirectGap-1e-9:
		// The tolerance lets a gap of exactly DirectGap pass despite binary rounding
		// (0.88 - 0.8 is 0.07999999999999996).
		d.Pass, d.Reason = true, fmt.Sprintf("gap %.2f >= %.2f", gap, c.DirectGap)
	default:
		d.Reason = fmt.Sprintf("top %.2f < %.2f and gap %.2f < %.2f over %s",
			d.Top, c.DirectHigh, gap, c.DirectGap, text.Count(len(cands), "result", "results"))
	}
	if d.Pass {
		d.Route = Direct
	}
	return d
}

// Route decides between the answering tiers: Direct when the T2 gate passes, else
// SingleLLM when some result has R >= PrefetchMin, else Agentic.
func (c Config) Route(results []rank.Result) Decision {
	d := c.Direct(results)
	switch {
	case d.Pass:
	case len(c.candidates(results)) > 0:
		d.Route = SingleLLM
	default:
		d.Route = Agentic
	}
	return d
}

// Decide runs the out-of-domain rules, then Route.
func (c Config) Decide(in OODInput) (Decision, string) {
	if rule, ood := c.OutOfDomain(in); ood {
		top := 0.0
		if len(in.Results) > 0 {
			top = bestTwo(in.Results)[0]
		}
		return Decision{Route: OutOfDomain, Reason: "out of domain: " + rule, Top: top}, rule
	}
	return c.Route(in.Results), ""
}

// Prefetch returns the answer candidates in result order: R >= PrefetchMin, at most
// DirectMaxDocs. They are the documents of a direct answer and of a T3 prompt. A folder
// summary that scored only through a match below it (rank.Result.Propagated) is none:
// it holds no answer of its own, and with a PropagationFactor near 1 it led a direct
// answer with the folder's description, or took the second place of its gap rule.
func (c Config) Prefetch(results []rank.Result) []rank.Result {
	cands := c.candidates(results)
	return cands[:min(len(cands), c.DirectMaxDocs)]
}

func (c Config) candidates(results []rank.Result) []rank.Result {
	var out []rank.Result
	for _, r := range results {
		if r.Relevance >= c.PrefetchMin && !r.Propagated {
			out = append(out, r)
		}
	}
	return out
}

// topStrength returns the Strength of the candidate with the top relevance.
func topStrength(cands []rank.Result) float64 {
	best := cands[0]
	for _, r := range cands[1:] {
		if r.Relevance > best.Relevance {
			best = r
		}
	}
	return best.Strength
}

// bestTwo returns the two highest relevances (results are ordered by compound score, which
// need not follow R); missing values are 0.
func bestTwo(rs []rank.Result) [2]float64 {
	var b [2]float64
	for _, r := range rs {
		v := r.Relevance
		if math.IsNaN(v) {
			continue
		}
		switch {
		case v > b[0]:
			b[0], b[1] = v, b[0]
		case v > b[1]:
			b[1] = v
		}
	}
	return b
}
