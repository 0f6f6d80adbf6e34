package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// Every engine, worker and stream a test starts must be gone when it ends:
// a leaked scheduler or prefill goroutine is a leaked request.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
