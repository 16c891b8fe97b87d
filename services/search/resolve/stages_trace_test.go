package resolve_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/search/gate"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestStagesThatSearchOrDecideAreSpans: a traced Resolve records its search, its entity
// search when one runs and its gate (the out-of-domain check, or the T2 gate) as child
// spans of the caller's span, each with its outcome and what a reader of the trace
// looks for: the scope searched, the entity terms, the gate's inputs (relevance, result
// count, whether all terms matched, the top document and score) and the out-of-domain
// rule that fired. The caller's span gets the route, the knowledge base and the
// generation. Parsing, ranking and writing the answer make no spans.
func TestStagesThatSearchOrDecideAreSpans(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	f := newFixture(t, false)
	tests := []struct {
		name, query string
		stages      []string
		ood         bool
	}{
		{"scoped, with an entity search", "deploy/kubernetes canary", []string{"search.search", "search.entity_search", "search.gate"}, false},
		{"an entity search", "pgbouncer pool mode", []string{"search.search", "search.entity_search", "search.gate"}, false},
		{"out of domain", "How do I rotate Kafka consumer credentials?", []string{"search.search", "search.gate"}, true},
		{"a direct answer", "How do I rotate the JWT signing key?", []string{"search.search", "search.gate"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			ctx, server := tp.Tracer("test").Start(context.Background(), "server")
			r, err := f.res.Resolve(ctx, platform, tt.query)
			server.End()
			if err != nil {
				t.Fatal(err)
			}
			if (r.Route == gate.OutOfDomain) != tt.ood {
				t.Fatalf("precondition: route %v for %q", r.Route, tt.query)
			}
			if tt.query == "How do I rotate the JWT signing key?" && r.Route != gate.Direct {
				t.Fatalf("precondition: route %v, want direct", r.Route)
			}
			spans := exp.GetSpans()
			byName := map[string]tracetest.SpanStub{}
			var names []string
			for _, s := range spans {
				if s.Name == "server" {
					continue
				}
				names = append(names, s.Name)
				byName[s.Name] = s
				if s.Parent.SpanID() != server.SpanContext().SpanID() {
					t.Errorf("span %s is not a child of the caller's span", s.Name)
				}
			}
			if !slices.Equal(names, tt.stages) {
				t.Fatalf("stage spans %v, want %v", names, tt.stages)
			}
			root := spanAttrs(spans[len(spans)-1])
			for k, want := range map[string]string{"quarry.kb": platform, "quarry.route": r.Route.String(), "quarry.generation": fmt.Sprint(r.KB.Generation)} {
				if root[k] != want {
					t.Errorf("caller's span has %s=%q, want %q", k, root[k], want)
				}
			}

			search := spanAttrs(byName["search.search"])
			if !strings.HasSuffix(search["quarry.outcome"], "hits") || search["quarry.scope"] != r.Trace.Scope {
				t.Errorf("search.search %v, want its hits and scope %q", search, r.Trace.Scope)
			}
			if strings.HasPrefix(tt.name, "scoped") && r.Trace.Scope == "" {
				t.Fatal("precondition: the question is not scoped")
			}
			if s, ok := byName["search.entity_search"]; ok {
				var terms []string
				for _, a := range s.Attributes {
					if a.Key == "quarry.entity_terms" {
						terms = a.Value.AsStringSlice()
					}
				}
				if len(terms) == 0 || !slices.Equal(terms, r.Trace.EntityTerms) {
					t.Errorf("search.entity_search has quarry.entity_terms %q, want %q", terms, r.Trace.EntityTerms)
				}
			}

			g := spanAttrs(byName["search.gate"])
			want := map[string]string{
				"quarry.results":           fmt.Sprint(len(r.Results)),
				"quarry.all_terms_matched": fmt.Sprint(r.Trace.AllTermsMatched),
			}
			if len(r.Results) > 0 {
				want["quarry.top_path"] = r.Results[0].Doc.Path
				want["quarry.top_score"] = fmt.Sprint(r.Results[0].Score)
			}
			if tt.ood {
				want["quarry.ood_rule"] = r.Trace.OODRule
				want["quarry.outcome"] = "out of domain: " + r.Trace.OODRule
			} else {
				want["quarry.outcome"] = r.Trace.Decision.Reason
				want["quarry.gate.top_relevance"] = fmt.Sprint(r.Trace.Decision.Top)
				want["quarry.gate.second_relevance"] = fmt.Sprint(r.Trace.Decision.Second)
			}
			if tt.ood && r.Trace.OODRule == "" || !tt.ood && r.Trace.Decision.Reason == "" {
				t.Fatalf("precondition: trace %+v names no decision", r.Trace)
			}
			for k, v := range want {
				if g[k] != v {
					t.Errorf("search.gate has %s=%q, want %q", k, g[k], v)
				}
			}
			if tt.ood {
				// The out-of-domain check decides before the relevance gate runs: it
				// has no relevance to show, and a 0 would read as one measured.
				for _, k := range []string{"quarry.gate.top_relevance", "quarry.gate.second_relevance"} {
					if v, ok := g[k]; ok {
						t.Errorf("out-of-domain search.gate has %s=%s, a relevance the gate never computed", k, v)
					}
				}
			}
		})
	}
}

// TestAFailedResolveNamesNoRoute: a Resolve that fails routed nothing, so the caller's
// span carries no quarry.route; it said "unspecified", a route of its own to whoever
// groups traces by route.
func TestAFailedResolveNamesNoRoute(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	f := newFixture(t, false)
	exp.Reset()
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, server := tp.Tracer("test").Start(cctx, "server")
	_, err := f.res.Resolve(ctx, platform, "How do I rotate the JWT signing key?")
	server.End()
	if err == nil {
		t.Fatal("precondition: Resolve with a cancelled context succeeded")
	}
	spans := exp.GetSpans()
	root := spanAttrs(spans[len(spans)-1])
	if v, ok := root["quarry.route"]; ok {
		t.Errorf("a failed Resolve's span has quarry.route=%q", v)
	}
	if root["quarry.kb"] != platform {
		t.Errorf("a failed Resolve's span has quarry.kb=%q, want %q", root["quarry.kb"], platform)
	}
}

func spanAttrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}
