package main

import "testing"

// TestDemoIncidentCommand runs the command as a user would and relies on
// its exit code, which is 0 only when the matrix holds.
func TestDemoIncidentCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole incident matrix; the engine package tests it in short mode too")
	}
	if rc := runDemo([]string{"incident", "--json"}); rc != 0 {
		t.Fatalf("sluice demo incident exited %d", rc)
	}
	if rc := runDemo([]string{"nonsense"}); rc != 2 {
		t.Fatalf("an unknown demo exited %d, want 2", rc)
	}
}
