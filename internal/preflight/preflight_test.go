package preflight

import (
	"regexp"
	"strings"
	"testing"
)

// stories260K's shape (see ../shared/models/README.md): 5 layers, 8 heads
// of n_embd 64 -> head dim 8, 4 KV heads. KV bytes per token by hand:
// 5 * 4 * 8 * 2 (K,V) * 4 bytes = 1280 with F32 pages; a 16-slot page is
// 20480 bytes.
var stories = Model{Name: "stories260K", WeightBytes: 1_000_000, Layers: 5, KVHeads: 4, HeadDim: 8, TrainContext: 512, KVType: KVF32}

func TestKVBytesPerToken(t *testing.T) {
	if got := stories.KVBytesPerToken(); got != 1280 {
		t.Fatalf("KV bytes per token = %d, want 1280", got)
	}
}

// TestF16PoolHoldsTwiceTheContext: with F16 pages (the default) the same
// --kv-memory holds twice the tokens: 5*4*8*2*2 = 640 bytes a token, so
// the 8 F32 pages' 163840 bytes hold 16 pages, 256 tokens, and a context
// of 256 that F32 pages refuse passes (I2 with the doubled capacity).
func TestF16PoolHoldsTwiceTheContext(t *testing.T) {
	for _, c := range []struct {
		typ    string
		tokens int
		ok     bool
	}{{KVF32, 128, false}, {KVF16, 256, true}, {"", 256, true}, {KVQ8_0, 480, true}} { // q8_0: 5*2*34 = 340 bytes a token, 30 pages of 5440
		m := stories
		m.KVType = c.typ
		rep := Local(Input{Model: m, Context: 256, Pools: []Pool{{Role: RoleDecode, KVMemory: 8 * 20480}}})
		r := rep.Roles[0]
		if rep.OK != c.ok || r.PoolTokens != c.tokens || r.KVType != map[string]string{"": KVF16}[c.typ]+c.typ {
			t.Errorf("kv type %q: OK %v, %d tokens (%s), want %v, %d: %+v", c.typ, rep.OK, r.PoolTokens, r.KVType, c.ok, c.tokens, rep)
		}
	}
	if rep := Local(Input{Model: Model{Name: "x", Layers: 1, KVHeads: 1, HeadDim: 1, KVType: "q8"}, Pools: []Pool{{Role: RoleDecode, PoolTokens: 16}}}); rep.OK {
		t.Error("unknown KV type accepted")
	}
	if rep := Local(Input{Model: Model{Name: "x", Layers: 1, KVHeads: 1, HeadDim: 8, KVType: KVQ8_0}, Pools: []Pool{{Role: RoleDecode, PoolTokens: 16}}}); rep.OK {
		t.Error("q8_0 pages of an 8-wide KV row (not whole blocks) accepted")
	}
}

// I2: a pool exactly the size of the context passes.
func TestPoolEqualToContextPasses(t *testing.T) {
	rep := Local(Input{Model: stories, Context: 128, Pools: []Pool{
		{Role: RolePrefill, KVMemory: 8 * 20480},
		{Role: RoleDecode, PoolTokens: 128},
	}})
	if !rep.OK || rep.Err() != nil {
		t.Fatalf("want OK, got %+v", rep)
	}
	for _, r := range rep.Roles {
		if r.Pages != 8 || r.PoolTokens != 128 || r.EffectiveContext != 128 || r.KVBytesPerToken != 1280 || r.PoolBytes != 8*20480 {
			t.Errorf("%s: %+v", r.Role, r)
		}
	}
}

// I2: one token more than the pool holds is refused, naming the role, both
// numbers and what to change.
func TestPoolSmallerThanContextFails(t *testing.T) {
	rep := Local(Input{Model: stories, Context: 129, Pools: []Pool{
		{Role: RolePrefill, KVMemory: 1 << 20},
		{Role: RoleDecode, KVMemory: 8*20480 + 20479}, // not a whole extra page
	}})
	if rep.OK || rep.Err() == nil {
		t.Fatalf("want failure, got %+v", rep)
	}
	if len(rep.Problems) != 1 {
		t.Fatalf("want exactly the decode problem, got %q", rep.Problems)
	}
	p := rep.Problems[0]
	for _, want := range []string{"decode", "129", "128 tokens", "--kv-memory", "--context"} {
		if !strings.Contains(p, want) {
			t.Errorf("problem %q does not mention %q", p, want)
		}
	}
	// ceil(129/16)=9 pages * 20480 bytes is the memory that would fit.
	if !strings.Contains(p, "184320") {
		t.Errorf("problem %q does not say the memory needed (184320 bytes)", p)
	}
	if !rep.Roles[0].OK || rep.Roles[1].OK {
		t.Errorf("per-role verdicts wrong: %+v", rep.Roles)
	}
	if rep.EffectiveContext != 0 {
		t.Errorf("a failed report must not advertise a context, got %d", rep.EffectiveContext)
	}
}

// I2 with auto: the context is lowered to the smallest pool and a note says so.
func TestAutoLowersToSmallestPool(t *testing.T) {
	rep := Local(Input{Model: stories, Context: 0, Pools: []Pool{
		{Role: RolePrefill, PoolTokens: 300}, // 19 pages = 304 tokens
		{Role: RoleDecode, PoolTokens: 100},  // 7 pages = 112 tokens
	}})
	if !rep.OK || rep.EffectiveContext != 112 {
		t.Fatalf("want OK with context 112, got %+v", rep)
	}
	// A context below the model's own is a WARN, with the numbers.
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "512") || !strings.Contains(rep.Warnings[0], "112") {
		t.Fatalf("auto warning %q must name 512 and 112", rep.Warnings)
	}
	// Pools bigger than the training context: auto keeps the training context.
	rep = Local(Input{Model: stories, Pools: []Pool{{Role: RoleColocated, PoolTokens: 4096}}})
	if !rep.OK || rep.EffectiveContext != 512 {
		t.Fatalf("want 512, got %+v", rep)
	}
}

func TestPoolWithoutAPageFails(t *testing.T) {
	rep := Local(Input{Model: stories, Pools: []Pool{{Role: RoleDecode, KVMemory: 20479}}})
	if rep.OK || len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0], "single page") {
		t.Fatalf("want a no-page failure, got %+v", rep)
	}
	if rep := Local(Input{Model: Model{Name: "x"}, Context: 10, Pools: []Pool{{Role: RoleDecode, PoolTokens: 16}}}); rep.OK {
		t.Fatal("a model without a KV shape must fail")
	}
	if rep := Local(Input{Model: stories, Context: 10}); rep.OK {
		t.Fatal("no pools must fail")
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"512MiB": 512 << 20, "1GiB": 1 << 30, "64MB": 64e6, "4096": 4096, "2k": 2048, " 3 KiB ": 3072, "10b": 10,
	} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5GiB", "12XB", "99999999999999999999"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
}

// The --kv-memory a refusal suggests is a value the flag takes (a whole
// KiB, MiB or GiB, not 64000000 bytes to count the digits of), and it is
// enough: given back, the same context passes.
func TestSuggestedKVMemoryFits(t *testing.T) {
	sizes := []struct {
		ctx int
		mem int64
	}{{129, 8 * 20480}, {100000, 1 << 20}, {4096, 3 << 20}, {1 << 20, 1 << 30}, {16, 100}}
	for _, c := range sizes {
		rep := Local(Input{Model: stories, Context: c.ctx, Pools: []Pool{{Role: RoleDecode, KVMemory: c.mem}}})
		if rep.OK || len(rep.Problems) != 1 {
			t.Fatalf("context %d in %d bytes: want one refusal, got %+v", c.ctx, c.mem, rep)
		}
		m := regexp.MustCompile(`--kv-memory to at least (\S+)`).FindStringSubmatch(rep.Problems[0])
		if m == nil {
			t.Fatalf("no --kv-memory value in %q", rep.Problems[0])
		}
		mem, err := ParseBytes(m[1])
		if err != nil || !regexp.MustCompile(`^\d+[KMG]iB$`).MatchString(m[1]) {
			t.Fatalf("suggested %q is not a whole-unit value the flag takes: %v", m[1], err)
		}
		if again := Local(Input{Model: stories, Context: c.ctx, Pools: []Pool{{Role: RoleDecode, KVMemory: mem}}}); !again.OK {
			t.Errorf("context %d: the suggested --kv-memory %s is not enough: %q", c.ctx, m[1], again.Problems)
		}
	}
	for _, c := range []struct {
		n    int64
		want string
	}{{1, "1KiB"}, {1024, "1KiB"}, {1025, "2KiB"}, {64000000, "62MiB"}, {4 << 30, "4GiB"}, {4<<30 + 1, "5GiB"}} {
		if got := FlagBytes(c.n); got != c.want {
			t.Errorf("FlagBytes(%d) = %s, want %s", c.n, got, c.want)
		}
	}
}
