package engine

import (
	"runtime"
	"testing"
	"time"
)

func TestIndexWorkersLeaveACoreToSearches(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer lastSearch.Store(lastSearch.Load())
	now := int64(time.Since(epoch)) + 1
	tests := []struct {
		name  string
		procs int
		last  int64 // lastSearch
		want  int
	}{
		{"no search yet: every core", 4, 0, 4},
		{"a search just now: one core fewer", 4, now, 3},
		{"searches on one core: still one worker", 1, now, 1},
		{"the last search over a second ago: every core", 4, now - int64(2*time.Second), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GOMAXPROCS(tt.procs)
			lastSearch.Store(tt.last)
			if got := IndexWorkers(); got != tt.want {
				t.Errorf("IndexWorkers() = %d, want %d", got, tt.want)
			}
		})
	}
	lastSearch.Store(0)
	NoteSearch()
	if !Searching() {
		t.Error("Searching() is false right after a search")
	}
}
