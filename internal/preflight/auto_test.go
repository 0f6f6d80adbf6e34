package preflight

import (
	"strings"
	"testing"
)

// SizeAuto is a pure function of the machine's figures: no test
// allocates what it sizes.
func TestSizeAuto(t *testing.T) {
	const gib = 1 << 30
	bpt := stories.KVBytesPerToken() // 1280 (f32)
	for _, c := range []struct {
		name string
		in   AutoInput
		want int64
	}{
		// 50% of (10 GiB - 2 GiB mapped weights) = 4 GiB over 2 pools.
		{"split", AutoInput{Room: 10 * gib, Weights: 2 * gib, Pools: 2, BytesPerToken: bpt, PageSize: 16}, 2 * gib},
		// The cap: 64 sequences x 512 tokens x 1280 bytes = 40 MiB.
		{"capped", AutoInput{Room: 10 * gib, Pools: 2, BytesPerToken: bpt, PageSize: 16, Context: 512, MaxConcurrency: 64}, 64 * 512 * 1280},
		// A context that is not a whole number of pages rounds up.
		{"cap rounds pages", AutoInput{Room: 10 * gib, Pools: 1, BytesPerToken: bpt, PageSize: 16, Context: 500, MaxConcurrency: 2}, 2 * 512 * 1280},
		// Weights larger than the room: nothing left.
		{"no room", AutoInput{Room: gib, Weights: 2 * gib, Pools: 1, BytesPerToken: bpt, PageSize: 16}, 0},
		// Unknown memory (not Linux): the old fixed default.
		{"unknown", AutoInput{Room: -1, Pools: 2, BytesPerToken: bpt, PageSize: 16}, AutoKVFallback},
		// A cgroup of 1 GiB with nothing mapped: 512 MiB for one pool.
		{"container", AutoInput{Room: gib, Pools: 1, BytesPerToken: bpt, PageSize: 16, Context: 1 << 20, MaxConcurrency: 64}, gib / 2},
	} {
		if got := SizeAuto(c.in).PerPool; got != c.want {
			t.Errorf("%s: %d bytes a pool, want %d", c.name, got, c.want)
		}
	}
	if s := SizeAuto(AutoInput{Room: 10 * gib, Weights: 2 * gib, Pools: 2}).String(); !strings.Contains(s, "50% of 10.0 GiB available less 2048 MiB of mapped weights") || !strings.Contains(s, "over 2 pools") {
		t.Errorf("String: %s", s)
	}
}

// I2 with auto sizing: a pool the machine sized too small for an explicit
// --context refuses, saying it was auto and what to give; with --context
// auto it lowers the context at WARN with the numbers; the banner figure
// (concurrency at full context) is pool tokens / context.
func TestAutoPoolAndContext(t *testing.T) {
	a := SizeAuto(AutoInput{Room: 2 * 20480 * 10, Pools: 1, BytesPerToken: 1280, PageSize: 16}) // 10 pages = 160 tokens
	pool := []Pool{{Role: RoleDecode, KVMemory: a.PerPool, Auto: &a}}
	rep := Local(Input{Model: stories, Context: 512, Pools: pool})
	if rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "sized by --kv-memory auto") ||
		!strings.Contains(rep.Problems[0], "--context 512") || !strings.Contains(rep.Problems[0], "160 tokens") {
		t.Fatalf("explicit context over an auto pool: %+v", rep)
	}
	rep = Local(Input{Model: stories, Pools: pool})
	if !rep.OK || rep.EffectiveContext != 160 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "from the model's training context 512 to 160") ||
		!strings.Contains(rep.Warnings[0], "--kv-memory auto") {
		t.Fatalf("auto context over an auto pool: %+v", rep)
	}
	if r := rep.Roles[0]; r.MaxConcurrency != 1 || !strings.HasPrefix(r.Sizing, "--kv-memory auto") {
		t.Errorf("banner figures: %+v", r)
	}
	rep = Local(Input{Model: stories, Context: 40, Pools: pool})
	if r := rep.Roles[0]; !rep.OK || r.MaxConcurrency != 4 {
		t.Errorf("160 tokens / context 40: %+v", r)
	}
}
