package grammar

import (
	"sync"
	"testing"
	"time"
)

// compileGate is a compile hook for the single-compile tests of Cache and
// Checks (TestCacheConcurrentMissesCompileOnce,
// TestChecksConcurrentMissesCompileOnce): it counts compiles by schema
// text, reports each on entered and holds it until gate closes.
type compileGate struct {
	mu       sync.Mutex
	compiles map[string]int
	entered  chan string
	gate     chan struct{}
}

func newCompileGate() *compileGate {
	return &compileGate{compiles: map[string]int{}, entered: make(chan string, 64), gate: make(chan struct{})}
}

// hook compiles after the gate opens; the schema refuse (if not "") is
// refused as unsupported_schema instead.
func (g *compileGate) hook(refuse string) func([]byte) (*Grammar, error) {
	return func(schema []byte) (*Grammar, error) {
		g.mu.Lock()
		g.compiles[string(schema)]++
		gate := g.gate
		g.mu.Unlock()
		g.entered <- string(schema)
		<-gate
		if refuse != "" && string(schema) == refuse {
			return nil, &Error{Code: "unsupported_schema", Msg: "refused"}
		}
		return CompileSchema(schema)
	}
}

// panicFirst panics in each schema's first compile, once waited returns
// (a waiter has joined it); later compiles run at once.
func (g *compileGate) panicFirst(waited func()) func([]byte) (*Grammar, error) {
	return func(schema []byte) (*Grammar, error) {
		g.mu.Lock()
		g.compiles[string(schema)]++
		p := g.compiles[string(schema)] == 1
		g.mu.Unlock()
		if p {
			waited()
			panic("compile panicked")
		}
		return CompileSchema(schema)
	}
}

// reopen gives the hook a new, closed-to-start gate.
func (g *compileGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *compileGate) count(schema string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.compiles[schema]
}

// waitFor polls ok for up to 10 s, failing the test with what.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
