package server

import (
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/search/gate"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/manifest"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/resolve"
	"github.com/quarry-router/quarry/services/search/tree"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func routeTier(r gate.Route) quarryv1.Tier {
	switch r {
	case gate.OutOfDomain:
		return quarryv1.Tier_TIER_OUT_OF_DOMAIN
	case gate.Direct:
		return quarryv1.Tier_TIER_DIRECT
	case gate.SingleLLM:
		return quarryv1.Tier_TIER_SINGLE_LLM
	case gate.Agentic:
		return quarryv1.Tier_TIER_AGENTIC
	default:
		return quarryv1.Tier_TIER_UNSPECIFIED
	}
}

func maturity(m tree.Maturity) quarryv1.Maturity {
	switch m {
	case tree.Core:
		return quarryv1.Maturity_MATURITY_CORE
	case tree.Validated:
		return quarryv1.Maturity_MATURITY_VALIDATED
	default:
		return quarryv1.Maturity_MATURITY_DRAFT
	}
}

// sources converts ranked results; k supplies each document's runtime maturity, which
// ranking folds into the boost without keeping it.
func sources(k *kb.KB, rs []rank.Result, excerpts map[string]string) []*quarryv1.Source {
	out := make([]*quarryv1.Source, 0, len(rs))
	for _, r := range rs {
		out = append(out, &quarryv1.Source{
			Path:       r.Doc.Path,
			Title:      r.Doc.Title,
			Score:      r.Score,
			Relevance:  r.Relevance,
			Archived:   r.Doc.Archived,
			Excerpt:    excerpts[r.Doc.Path],
			Maturity:   maturity(k.Signals.Get(r.Doc.Path).Maturity),
			Importance: r.Importance,
			Propagated: r.Propagated,
		})
	}
	return out
}

func document(d *tree.Document, k *kb.KB) *quarryv1.Document {
	sig := k.Signals.Get(d.Path)
	out := &quarryv1.Document{
		Path:       d.Path,
		Title:      d.Title,
		Content:    d.Content,
		Tags:       d.Tags,
		Related:    d.Related,
		Importance: sig.Importance,
		Maturity:   maturity(sig.Maturity),
		Archived:   d.Archived,
		Summary:    d.Summary,
	}
	if !d.Updated.IsZero() {
		out.Updated = timestamppb.New(d.Updated)
	}
	if len(d.Extra) > 0 {
		// Front matter may hold values Struct cannot carry (dates, nested keys of other
		// types); such documents are returned without their extra keys rather than failing.
		if s, err := structpb.NewStruct(jsonSafe(d.Extra)); err == nil {
			out.Extra = s
		}
	}
	return out
}

// jsonSafe converts YAML-decoded values to the JSON-like types structpb accepts.
func jsonSafe(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return jsonSafe(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case time.Time:
		return x.Format(time.RFC3339)
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	default:
		return v
	}
}

func gateTrace(r *resolve.Result, cfg resolve.Config) *quarryv1.GateTrace {
	g := cfg.Gate
	// Every -gate-* flag, as GateTrace.thresholds promises, and the ranking's gap filter
	// and crowding, which decide what the gates see.
	thresholds := g.Thresholds()
	thresholds["gap_ratio"] = cfg.Rank.GapRatio
	thresholds["crowding"] = cfg.Rank.Crowding
	t := &quarryv1.GateTrace{
		SearchText:      r.Trace.SearchText,
		Scope:           r.Trace.Scope,
		AllTermsMatched: r.Trace.AllTermsMatched,
		ResultCount:     int32(len(r.Results)),
		EntityTerms:     r.Trace.EntityTerms,
		TopRelevance:    r.Trace.Decision.Top,
		SecondRelevance: r.Trace.Decision.Second,
		OutOfDomainRule: r.Trace.OODRule,
		DirectDecision:  r.Trace.Decision.Reason,
		Thresholds:      thresholds,
	}
	if len(r.Results) > 0 {
		t.TopScore = r.Results[0].Score
	}
	for _, x := range r.Results {
		t.Results = append(t.Results, &quarryv1.ScoredResult{
			Path:             x.Doc.Path,
			EngineScore:      x.EngineScore,
			Coverage:         x.Coverage,
			Relevance:        x.Relevance,
			Importance:       x.Importance,
			Recency:          x.Recency,
			Boost:            x.Boost,
			Score:            x.Score,
			PropagatedFrom:   x.PropagatedFrom,
			FromEntitySearch: x.FromEntity,
		})
	}
	return t
}

func stages(ss []resolve.Stage) []*quarryv1.StageTiming {
	out := make([]*quarryv1.StageTiming, 0, len(ss))
	for _, s := range ss {
		out = append(out, &quarryv1.StageTiming{Name: s.Name, Duration: durationpb.New(s.Duration), Outcome: s.Outcome})
	}
	return out
}

func manifestProto(m *manifest.Manifest, gen uint64) *quarryv1.GetManifestResponse {
	lane := func(l manifest.Lane) *quarryv1.ManifestLane {
		out := &quarryv1.ManifestLane{BudgetTokens: int32(l.Budget), UsedTokens: int32(l.Used), Omitted: int32(l.Omitted)}
		for _, e := range l.Entries {
			out.Entries = append(out.Entries, &quarryv1.ManifestEntry{Path: e.Path, Title: e.Title, Summary: e.Summary, Tokens: int32(e.Tokens), Importance: e.Importance})
		}
		return out
	}
	return &quarryv1.GetManifestResponse{Summaries: lane(m.Summaries), Contexts: lane(m.Contexts), Stubs: lane(m.Stubs), Generation: gen}
}

func states(ss []kb.State) []*quarryv1.KnowledgeBaseState {
	out := make([]*quarryv1.KnowledgeBaseState, 0, len(ss))
	for _, s := range ss {
		out = append(out, &quarryv1.KnowledgeBaseState{Id: s.ID, Generation: s.Generation, ContentVersion: s.Version, DocumentCount: int32(s.Documents), Domains: s.Domains})
	}
	return out
}
