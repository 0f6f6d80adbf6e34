// Package spec holds the Promela models of sluice's protocols and the test
// that model-checks them with spin: handoff.pml (the handoff), shm.pml (the
// shared file's generation words, heartbeat-declared death and resumes),
// prefix.pml (shared prefix-cache pages and their readers), abortcommit.pml
// (a decode worker's abort racing a commit) and migrate.pml (a stream's
// preemption and migration). Each full model must hold every
// safety property, and each weakened variant (one safeguard removed) must
// produce a counterexample, so the model is known to be able to catch the
// bug each safeguard guards against. docs/testing.md lists the state
// counts.
package spec
