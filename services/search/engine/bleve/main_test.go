package bleve

import (
	"testing"

	"go.uber.org/goleak"
)

// Bleve runs background goroutines per index; Close must stop them all. The analysis
// workers are one process-wide pool that scorch starts at package init, not per index.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}
