package kbid

import (
	"regexp"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"platform", true}, {"a", true}, {"0", true}, {"team_a-1", true}, {strings.Repeat("k", MaxLen), true},
		{"", false}, {strings.Repeat("k", MaxLen+1), false}, {"Team", false}, {"-team", false}, {"_team", false},
		{"a/b", false}, {"kb.v1", false}, {"a b", false}, {"é", false}, {"a\x00", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// FuzzValidMatchesTheRule: the loop accepts exactly what the documented pattern does.
func FuzzValidMatchesTheRule(f *testing.F) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	for _, s := range []string{"platform", "-x", "a_b", strings.Repeat("z", 65), "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := Valid(id), pattern.MatchString(id); got != want {
			t.Errorf("Valid(%q) = %v, the pattern says %v", id, got, want)
		}
	})
}
