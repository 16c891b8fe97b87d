package server

import (
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// Text that looks the same must search the same: a word may reach the service composed
// or decomposed, in fullwidth or ligature forms, or with invisible format characters in
// it, in the documents and in the questions alike.
func TestSearchMatchesUnicodeEquivalentSpellings(t *testing.T) {
	const intl = "intl"
	f := serve(t, map[string]string{intl: writeTree(t, map[string]string{
		"ops/a.md": "# Café rollout\n\nThe café service ships behind the canary ring every night.\n",
		"ops/b.md": "# Re\u0301sume\u0301 parser\n\nThe re\u0301sume\u0301 parser extracts skills from uploads.\n",
		"ops/c.md": "# Observ\u00adability pipeline\n\nTraces flow through the observ\u00adability collector.\n",
		"ops/d.md": "# \ufb01rewall rules\n\nThe \ufb01rewall blocks inbound traffic.\n",
		"ops/e.md": "# Storage quota\n\nEach team gets a storage quota of one terabyte.\n",
		"ops/f.md": "# Mesh sidecars\n\nEvery pod runs an envoy sidecar in the mesh.\n",
	})})
	tests := []struct{ name, query, want string }{
		{"decomposed question, composed document", "cafe\u0301", "ops/a.md"},
		{"composed question, decomposed document", "résumé", "ops/b.md"},
		{"soft hyphen in the document", "observability", "ops/c.md"},
		{"ligature in the document", "firewall", "ops/d.md"},
		{"fullwidth question", "ｑｕｏｔａ", "ops/e.md"},
		{"zero-width joiner in the question", "side\u200dcar", "ops/f.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.client.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: intl, Query: tt.query, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if rs := resp.GetResults(); len(rs) == 0 || rs[0].GetPath() != tt.want {
				t.Errorf("Search(%q) = %v, want %s first", tt.query, rs, tt.want)
			}
		})
	}
}
