package loop

import (
	"testing"

	"go.uber.org/goleak"
)

// No call, timer or tool may outlive the answer it belongs to.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
