package rank

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestDistinct(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprint(i % 20)
	}
	tests := []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"a", "b"}, []string{"a", "b"}},
		{[]string{"a", "b", "a", "c", "b"}, []string{"a", "b", "c"}},
		{many, many[:20]},
	}
	for _, tt := range tests {
		if got := Distinct(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Distinct(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestCoverageIsLinearInTheQuery: Coverage runs once per candidate, and skipping a
// repeated stem by looking through the ones before it was quadratic in the query's
// stems; a 64 KiB request holds thousands.
func TestCoverageIsLinearInTheQuery(t *testing.T) {
	c := NewCorpus(corpusDocs())
	stems := make([]string, 40000)
	for i := range stems {
		stems[i] = fmt.Sprintf("q%x", i)
	}
	stems = append(stems, "rotat", "rotat")
	start := time.Now()
	got := c.Coverage("auth/jwt/rotation.md", stems)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Coverage of %d stems took %v", len(stems), took)
	}
	if got <= 0 || got >= 1 {
		t.Errorf("Coverage = %v, want a share in (0,1): one stem of many is in the document", got)
	}
}
