package signals

import (
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

func TestSeedNewKeepsLearnedStateAndForgetDropsIt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(DefaultConfig(), func() time.Time { return now })
	s.Seed("a.md", 50, tree.Draft, now)
	s.RecordCuration("a.md")
	s.Flush()
	if !s.SeedNew("b.md", 40, tree.Draft, now) {
		t.Error("SeedNew of an unknown path did nothing")
	}
	if s.SeedNew("a.md", 50, tree.Draft, now) {
		t.Error("SeedNew of a known path reseeded it")
	}
	if got := s.Get("a.md").Importance; got != 55 {
		t.Errorf("importance after a curation and a SeedNew = %v, want 55", got)
	}
	s.Forget([]string{"a.md"})
	if s.Get("a.md").Known {
		t.Error("a forgotten path is still known")
	}
	s.SeedNew("a.md", 50, tree.Draft, now)
	if got := s.Get("a.md").Importance; got != 50 {
		t.Errorf("a path created again starts at %v, want its front matter's 50", got)
	}
}
