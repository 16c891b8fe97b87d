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
	query := func(n int) []string {
		stems := make([]string, n)
		for i := range stems {
			stems[i] = fmt.Sprintf("q%x", i)
		}
		return append(stems, "rotat", "rotat")
	}
	// Timed against a tenth of the query in the same moments, best of three: linear is
	// about 10 times as long, quadratic 100 (an absolute bound failed on a busy machine).
	timed := func(stems []string) (took time.Duration, got float64) {
		took = time.Hour
		for range 3 {
			start := time.Now()
			got = c.Coverage("auth/jwt/rotation.md", stems)
			took = min(took, time.Since(start))
		}
		return took, got
	}
	small, _ := timed(query(4000))
	large, got := timed(query(40000))
	if large > 40*small+5*time.Millisecond {
		t.Errorf("Coverage of 40,002 stems took %v, of 4,002 %v: not linear", large, small)
	}
	if got <= 0 || got >= 1 {
		t.Errorf("Coverage = %v, want a share in (0,1): one stem of many is in the document", got)
	}
}
