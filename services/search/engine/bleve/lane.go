package bleve

import (
	"sync"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/registry"

	"github.com/quarry-router/quarry/services/search/engine"
)

// laneAnalyzer is the analyzer type of the index mapping: Bleve's custom analyzer (the
// same tokenizer and filters) whose work goes through the indexing lane.
const laneAnalyzer = "quarry_lane"

func init() {
	err := registry.RegisterAnalyzer(laneAnalyzer, func(config map[string]any, cache *registry.Cache) (analysis.Analyzer, error) {
		inner, err := custom.AnalyzerConstructor(config, cache)
		if err != nil {
			return nil, err
		}
		return laned{inner}, nil
	})
	if err != nil {
		panic(err)
	}
}

// laned runs an analyzer in the indexing lane. Searches never analyse text (they look
// stems up directly), so the lane holds back indexing only.
type laned struct{ analysis.Analyzer }

func (a laned) Analyze(input []byte) analysis.TokenStream {
	indexing.acquire()
	defer indexing.release()
	return a.Analyzer.Analyze(input)
}

// indexing bounds the analyses running at once, across every index of the process, to
// engine.IndexWorkers: Bleve analyses a batch's documents on four goroutines of its own,
// which on a two-core machine left queries no core while a sync indexed.
var indexing = newLane()

type lane struct {
	mu      sync.Mutex
	cond    sync.Cond
	running int
}

func newLane() *lane {
	l := &lane{}
	l.cond.L = &l.mu
	return l
}

func (l *lane) acquire() {
	l.mu.Lock()
	// The limit is read again on every wake-up: it drops while searches are served and
	// rises when they stop. It is never below one, so the lane always moves.
	for l.running >= engine.IndexWorkers() {
		l.cond.Wait()
	}
	l.running++
	l.mu.Unlock()
}

func (l *lane) release() {
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	l.cond.Signal()
}
