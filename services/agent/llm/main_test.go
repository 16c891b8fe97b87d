package llm

import (
	"testing"

	"go.uber.org/goleak"
)

// A cancelled or failed call leaves no stream or retry timer behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
