package server

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// TestAnyQueryUnderTheLimitIsCheap: a query within maxQueryBytes is answered in
// milliseconds whatever it holds. Each of these took seconds (the long word minutes at
// 64 KiB, past the caller's deadline, with the server still working on it): typo fixes
// tried every edit of a long word, an asking verb repeated re-read the whole query each
// time, and thousands of distinct words went to the engine and to coverage checks that
// were quadratic in them.
func TestAnyQueryUnderTheLimitIsCheap(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	word := make([]byte, 1500)
	for i := range word {
		word[i] = byte('a' + r.Intn(26))
	}
	var distinct strings.Builder
	distinct.WriteString("rollback deployment ")
	for i := 0; distinct.Len() < maxQueryBytes-16; i++ {
		fmt.Fprintf(&distinct, "q%x ", i)
	}
	tests := []struct{ name, query string }{
		{"one long unknown word", "rollback " + string(word)},
		{"an asking verb repeated", strings.Repeat("tell ", maxQueryBytes/5)},
		{"thousands of distinct words", distinct.String()},
	}
	f := start(t)
	// Generous for -race on two shared cores: each took 10–50 ms without it.
	const budget = 3 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.query) > maxQueryBytes {
				t.Fatalf("the query is %d bytes, over the limit: fix the test", len(tt.query))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			began := time.Now()
			_, err := f.client.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: tt.query})
			if took := time.Since(began); err != nil || took > budget {
				t.Errorf("Resolve of %d bytes: %v after %v, want an answer within %v", len(tt.query), err, took, budget)
			}
		})
	}
}
