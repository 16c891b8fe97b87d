package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
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
