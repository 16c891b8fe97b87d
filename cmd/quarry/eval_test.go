package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

const (
	evalKB        = "../../examples/kb/platform"
	evalQuestions = "../../examples/questions.jsonl"
)

func TestEvalReportsSaneFiguresOnTheExampleSet(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := evalCmd(context.Background(), []string{"-json", "-kb", evalKB, evalQuestions}, &out, &errOut); err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut.String())
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.KnownItems != 42 || r.OutOfDomain != 13 || r.SamePairs+r.DifferentPairs+r.OtherHits != 20 {
		t.Fatalf("counted %d known, %d ood, %d+%d+%d pairs; want 42, 13, 20", r.KnownItems, r.OutOfDomain, r.SamePairs, r.DifferentPairs, r.OtherHits)
	}
	mix := 0
	for _, n := range r.TierMix {
		mix += n
	}
	if mix != r.KnownItems+r.OutOfDomain {
		t.Errorf("tier mix sums to %d, want %d", mix, r.KnownItems+r.OutOfDomain)
	}
	for name, got := range map[string]rate{"T2 precision": r.T2Precision, "recall@5": r.RecallAt5, "OOD recall": r.OODRecall, "fuzzy hit": r.FuzzyHit} {
		if got.Value == nil || *got.Value < 0.8 {
			t.Errorf("%s = %v, want >= 80%% on the example set", name, got)
		}
	}
	if *r.RecallAt1.Value > *r.RecallAt5.Value {
		t.Errorf("recall@1 %v above recall@5 %v", r.RecallAt1, r.RecallAt5)
	}
	if r.T2Coverage.Value == nil || *r.T2Coverage.Value < 0.3 || *r.FalseOOD.Value > 0.05 || *r.FuzzyWrong.Value > 0.2 {
		t.Errorf("coverage %v, false OOD %v, fuzzy wrong %v out of range", r.T2Coverage, r.FalseOOD, r.FuzzyWrong)
	}
	if r.Latency["DIRECT"].N == 0 || r.Latency["DIRECT"].P50ms <= 0 {
		t.Errorf("no DIRECT latency: %+v", r.Latency)
	}
}

func TestEvalFailsWhenAThresholdIsMissed(t *testing.T) {
	var out, errOut bytes.Buffer
	// A phrasing bar without -phrasings cannot be measured.
	if err := evalCmd(context.Background(), []string{"-kb", evalKB, "-min-phrasing-kept", "0.9", evalQuestions}, &out, &errOut); !errors.Is(err, errThresholds) {
		t.Fatalf("-min-phrasing-kept without -phrasings: err = %v, want %v", err, errThresholds)
	}
	// A rate cannot exceed 1.
	err := evalCmd(context.Background(), []string{"-kb", evalKB, "-min-ood-recall", "1.01", evalQuestions}, &out, &errOut)
	if !errors.Is(err, errThresholds) {
		t.Fatalf("err = %v, want %v", err, errThresholds)
	}
	if code := run(context.Background(), []string{"eval", "-kb", evalKB, "-max-false-ood", "-0.5", "-min-t2-precision", "1.01", evalQuestions}, &out, &errOut); code == 0 {
		t.Fatal("quarry eval exited 0 with a missed threshold")
	}
}

func TestEvalRejectsMalformedQuestionFiles(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/q.jsonl"
	if err := writeFile(bad, `{"kind":"known_item","query":"x"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := readLabelled([]string{bad}); err == nil {
		t.Fatal("a known_item without expect was accepted")
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

// -phrasings asks the example set's questions wrapped in words that name nothing and
// finds every route kept: a greeting, a request to be told, thanks or a ticket number
// must not change where a question goes.
func TestEvalPhrasingsKeepEveryRouteOnTheExampleSet(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := evalCmd(context.Background(), []string{"-json", "-phrasings", "-min-phrasing-kept", "1", "-kb", evalKB, evalQuestions}, &out, &errOut); err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut.String())
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Phrasings) != len(phrasings) {
		t.Fatalf("%d phrasings reported, want %d", len(r.Phrasings), len(phrasings))
	}
	for _, p := range r.Phrasings {
		if p.Questions != r.KnownItems+r.OutOfDomain {
			t.Errorf("%s: %d questions asked, want %d", p.Phrasing, p.Questions, r.KnownItems+r.OutOfDomain)
		}
		if p.Kept.Num != p.Questions {
			t.Errorf("%s (%s): route kept for %v; changed: %q", p.Phrasing, p.Example, p.Kept, p.Changed)
		}
	}
}

func TestPhrasingWrap(t *testing.T) {
	tests := []struct {
		p    phrasing
		q    string
		want string
	}{
		{phrasing{Prefix: "Hey team, "}, "How do I rotate the key?", "Hey team, how do I rotate the key?"},
		{phrasing{Prefix: "Hey team, "}, "TLS or mTLS?", "Hey team, TLS or mTLS?"},
		{phrasing{Suffix: " TIA"}, "How do I rotate the key?", "How do I rotate the key TIA?"},
		{phrasing{Suffix: " TIA"}, "rotate the key", "rotate the key TIA?"},
	}
	for _, tt := range tests {
		if got := tt.p.wrap(tt.q); got != tt.want {
			t.Errorf("wrap(%q) = %q, want %q", tt.q, got, tt.want)
		}
	}
	if (phrasing{Prefix: "Hey team, "}).applies("Pandas: how do I read a CSV?") {
		t.Error("a prefix applies to a question that opens with a topic label")
	}
}

// scorePair scores a pair only by the fuzzy cache's decision on b against a's answer.
// A b answered from the exact cache was asked before (the same b in another pair, or
// another pair's a): the fuzzy cache decided nothing, so the pair is not scored. It was
// scored as "not served from a's answer": a correct refusal for a different-answer pair
// (the wrong-hit rate's denominator grew with no fuzzy decision behind it) and a miss for
// a same-answer one.
func TestScorePair(t *testing.T) {
	yes, no := true, false
	resp := func(tier quarryv1.Tier, fromCache bool, candidate string) *quarryv1.QueryResponse {
		return &quarryv1.QueryResponse{Tier: tier, OriginTier: quarryv1.Tier_TIER_DIRECT, FromCache: fromCache,
			Explain: &quarryv1.Explain{Cache: &quarryv1.CacheTrace{FuzzyCandidate: candidate}}}
	}
	const a = "How do I Rotate the key?"
	tests := []struct {
		name string
		same *bool
		resp *quarryv1.QueryResponse
		want pairOutcome
	}{
		{"fuzzy hit on a", &yes, resp(quarryv1.Tier_TIER_FUZZY_CACHE, true, "how do i rotate the key?"), pairHit},
		{"fuzzy hit on a, different pair", &no, resp(quarryv1.Tier_TIER_FUZZY_CACHE, true, "how do i rotate the key?"), pairHit},
		{"fuzzy hit on another question", &no, resp(quarryv1.Tier_TIER_FUZZY_CACHE, true, "how do i revoke the key?"), pairOther},
		{"answered fresh", &yes, resp(quarryv1.Tier_TIER_DIRECT, false, ""), pairMiss},
		{"candidate turned down, answered fresh", &no, resp(quarryv1.Tier_TIER_DIRECT, false, "how do i rotate the key?"), pairMiss},
		{"exact hit: b asked before, same-answer pair", &yes, resp(quarryv1.Tier_TIER_EXACT_CACHE, true, ""), pairOther},
		{"exact hit: b asked before, different-answer pair", &no, resp(quarryv1.Tier_TIER_EXACT_CACHE, true, ""), pairOther},
		{"from cache, no explain", &no, &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_EXACT_CACHE, FromCache: true}, pairOther},
	}
	for _, tt := range tests {
		q := labelled{Kind: kindPair, A: a, B: "rotate the key, how do I?", Same: tt.same}
		if got := scorePair(q, tt.resp); got != tt.want {
			t.Errorf("%s: scorePair = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// The same b in two different-answer pairs: the second asking is an exact hit on the
// first one's answer, which says nothing about the fuzzy cache, so it is not scored.
func TestEvalDoesNotScoreAPairWhoseBWasAskedBefore(t *testing.T) {
	qs := t.TempDir() + "/q.jsonl"
	if err := writeFile(qs, `{"kind":"pair","a":"How do I rotate JWT signing keys?","b":"How do I revoke JWT refresh tokens?","same":false}
{"kind":"pair","a":"How do I issue an API key for a partner?","b":"How do I revoke JWT refresh tokens?","same":false}
`); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := evalCmd(context.Background(), []string{"-json", "-kb", evalKB, qs}, &out, &errOut); err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut.String())
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.DifferentPairs != 1 || r.OtherHits != 1 || r.FuzzyWrong.Den != 1 {
		t.Fatalf("scored %d different-answer pairs (wrong-hit %v), %d not scored; want 1 scored, 1 not", r.DifferentPairs, r.FuzzyWrong, r.OtherHits)
	}
}

// A known-item or out-of-domain question asked twice on one system is answered the
// second time from the exact cache, with the first asking's route: scored twice, and
// with two different expectations (the Go dev set asked "rand A Zipf generates Zipf
// distributed variates" of math/rand and of math/rand/v2) one of them is always wrong.
func TestReadLabelledRejectsAQuestionAskedTwice(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, lines string
		ok          bool
	}{
		{"same known item twice", `{"kind":"known_item","query":"How do I rotate keys?","expect":["a.md"]}
{"kind":"known_item","query":"How do I rotate keys?","expect":["b.md"]}`, false},
		{"same words, other case and spacing", `{"kind":"known_item","query":"How do I rotate keys?","expect":["a.md"]}
{"kind":"out_of_domain","query":"how do  I Rotate keys?"}`, false},
		{"across two files", `{"kind":"out_of_domain","query":"Can pandas read a CSV?"}
---
{"kind":"out_of_domain","query":"Can pandas read a CSV?"}`, false},
		{"pairs are asked on a system of their own", `{"kind":"known_item","query":"How do I rotate keys?","expect":["a.md"]}
{"kind":"pair","a":"How do I rotate keys?","b":"rotate keys, how do I?","same":true}
{"kind":"pair","a":"How do I rotate keys?","b":"How do I revoke keys?","same":false}`, true},
		{"different questions", `{"kind":"known_item","query":"How do I rotate keys?","expect":["a.md"]}
{"kind":"known_item","query":"How do I revoke keys?","expect":["a.md"]}`, true},
	}
	for i, tt := range tests {
		var paths []string
		for j, part := range strings.Split(tt.lines, "\n---\n") {
			p := fmt.Sprintf("%s/q%d-%d.jsonl", dir, i, j)
			if err := writeFile(p, part+"\n"); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		_, err := readLabelled(paths)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}
