// Package spec holds the Promela model of the handoff protocol
// (handoff.pml) and the test that model-checks it with spin: the full model
// must hold every safety property, and each weakened variant (one safeguard
// removed) must produce a counterexample, so the model is known to be able
// to catch the bug each safeguard guards against.
package spec
