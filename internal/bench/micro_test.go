package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

func TestBenchCommandPrintsTable(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	code := Run([]string{"--model", p, "--threads", "1,2", "--prompt", "16", "--gen", "4", "--reps", "1"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// stories260K is far below what --weights auto copies: it stays mapped.
	if len(lines) != 8 || lines[0] != "kernels: "+kernels.Describe() || !strings.HasPrefix(lines[1], "cpu:") ||
		!strings.HasPrefix(lines[2], "weights: stories260K: the file's shared mapping") || !strings.Contains(lines[3], "llama.cpp") {
		t.Fatalf("table:\n%s", out.String())
	}
	// Without --llama-bench there is no llama.cpp figure and no ratio;
	// the decode rows carry the K/V bytes they read and the bandwidth
	// fraction.
	for i, l := range lines[4:] {
		f := strings.Fields(l)
		test := []string{"pp16", "tg4"}[i%2]
		if f[0] != "stories260K" || f[2] != test || f[5] != "—" || f[6] != "—" {
			t.Errorf("row %q", l)
		}
		if test == "tg4" && (len(f) != 13 || !strings.HasSuffix(f[10], "%") || !strings.HasSuffix(f[12], "%")) {
			t.Errorf("decode row without the bandwidth fraction: %q", l)
		}
	}
}

// --weights copy moves the weights into anonymous memory and the bench
// says so; a placement it does not know is refused before any model loads.
func TestBenchWeightsFlag(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	if code := Run([]string{"--model", p, "--weights", "copy", "--threads", "1", "--prompt", "8", "--gen", "2", "--reps", "1", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Weights) != 1 || rep.Weights[0].Model != "stories260K" || !strings.HasPrefix(rep.Weights[0].Placement, "copied into anonymous huge pages") {
		t.Errorf("weights %+v", rep.Weights)
	}
	errb.Reset()
	if code := Run([]string{"--model", p, "--weights", "hugepages"}, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), `--weights: "hugepages" is not a weights placement`) {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// fakeLlamaBench writes a stand-in for llama-bench that logs its
// arguments (one line per run), sets P, N, T and D from -p, -n, -t and -d, and
// runs body (which prints llama-bench's JSON).
func fakeLlamaBench(t *testing.T, body string) (bin, log string) {
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "llama-bench"), filepath.Join(dir, "args.log")
	script := "#!/bin/sh\necho \"$@\" >> " + log + "\n" +
		"while [ $# -gt 0 ]; do case $1 in -p) P=$2;; -n) N=$2;; -t) T=$2;; -d) D=$2;; esac; shift; done\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func TestBenchLlamaBenchSideBySide(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	bin, log := fakeLlamaBench(t, `if [ "$N" = 0 ]; then echo "[{\"n_prompt\":$P,\"n_gen\":0,\"n_threads\":$T,\"avg_ts\":200.0}]"; else echo "[{\"n_prompt\":0,\"n_gen\":$N,\"n_threads\":$T,\"avg_ts\":50.0}]"; fi`)
	var out, errb bytes.Buffer
	code := Run([]string{"--model", p, "--threads", "1", "--prompt", "16", "--gen", "4", "--reps", "3", "--llama-bench", bin, "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if rep.Kernels != kernels.Describe() || len(rep.Rows) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rows {
		want := map[string]float64{"pp16": 200, "tg4": 50}[r.Test]
		if r.LlamaTokS != want || r.Ratio != r.TokS/want || r.TokS <= 0 {
			t.Errorf("%s: sluice %v, llama.cpp %v (want %v), ratio %v", r.Test, r.TokS, r.LlamaTokS, want, r.Ratio)
		}
	}
	if tg := rep.Rows[1]; tg.BWFraction <= 0 || tg.ReadGBps <= 0 || tg.WeightBytes == 0 || tg.CPUBWFraction <= 0 || tg.CPUReadGBps <= 0 {
		t.Errorf("decode row without bandwidth figures: %+v", tg)
	}
	// One llama-bench run per test and repetition, same file and threads.
	args, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	pp, tg := "-m "+p+" -p 16 -n 0 -d 0 -t 1 -r 1 -o json", "-m "+p+" -p 0 -n 4 -d 0 -t 1 -r 1 -o json"
	if got := strings.TrimSpace(string(args)); got != strings.Repeat(pp+"\n"+tg+"\n", 2)+pp+"\n"+tg {
		t.Errorf("llama-bench runs:\n%s\nwant 3 x %q, %q", args, pp, tg)
	}
	// Interleaved test by test: sluice, llama-bench, sluice, llama-bench, ...
	var order []string
	for _, l := range strings.Split(errb.String(), "\n") {
		if i := strings.Index(l, " rep "); i >= 0 {
			order = append(order, l[i+len(" rep 1/3 "):])
		}
	}
	one := "pp16: sluice,pp16: llama-bench,tg4: sluice,tg4: llama-bench"
	if got := strings.Join(order, ","); got != one+","+one+","+one {
		t.Errorf("run order %v", order)
	}
}

// TestBenchDepth: --depth runs each test after a prefilled context, passes
// -d on to llama-bench and names the tests as llama-bench does (its JSON's
// n_depth), one row per test and depth.
func TestBenchDepth(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	bin, log := fakeLlamaBench(t, `if [ "$N" = 0 ]; then echo "[{\"n_prompt\":$P,\"n_gen\":0,\"n_depth\":$D,\"n_threads\":$T,\"avg_ts\":200.0}]"; else echo "[{\"n_prompt\":0,\"n_gen\":$N,\"n_depth\":$D,\"n_threads\":$T,\"avg_ts\":50.0}]"; fi`)
	var out, errb bytes.Buffer
	code := Run([]string{"--model", p, "--threads", "1", "--prompt", "8", "--gen", "4", "--depth", "0,40", "--reps", "1", "--llama-bench", bin, "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var tests []string
	for _, r := range rep.Rows {
		tests = append(tests, r.Test)
		if r.LlamaTokS == 0 || r.TokS <= 0 {
			t.Errorf("%s: %+v", r.Test, r)
		}
	}
	if got := strings.Join(tests, ","); got != "pp8,tg4,pp8@d40,tg4@d40" {
		t.Errorf("tests %s", got)
	}
	args, _ := os.ReadFile(log)
	if !strings.Contains(string(args), "-p 0 -n 4 -d 40 ") {
		t.Errorf("llama-bench runs:\n%s", args)
	}
}

func TestBenchLlamaBenchFailures(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	for _, c := range []struct{ name, body, want string }{
		{"not json", `echo 'llama-bench: error'`, "not its JSON"},
		{"other threads", `echo '[{"n_prompt":16,"n_gen":0,"n_threads":4,"avg_ts":1}]'`, "4 threads"},
		{"no decode figure", `echo '[{"n_prompt":16,"n_gen":0,"n_threads":1,"avg_ts":1}]'`, "no tg4 figure"},
		{"wrong test", `echo '[{"n_prompt":8,"n_gen":0,"n_threads":1,"avg_ts":1}]'`, "no pp16 figure"},
		{"exit status", `echo 'failed to load model' >&2; exit 1`, "failed to load model"},
	} {
		bin, _ := fakeLlamaBench(t, c.body)
		var out, errb bytes.Buffer
		code := Run([]string{"--model", p, "--threads", "1", "--prompt", "16", "--gen", "4", "--reps", "1", "--llama-bench", bin}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q (want %q)", c.name, code, errb.String(), c.want)
		}
	}
	var errb bytes.Buffer
	if code := Run([]string{"--llama-bench", filepath.Join(t.TempDir(), "missing")}, &bytes.Buffer{}, &errb); code != 2 {
		t.Errorf("missing llama-bench binary: exit %d (%s)", code, errb.String())
	}
}

// TestDecodeWeightBytes: stories260K is all F32 with an untied output, so
// one decode step reads 4 bytes per parameter of every layer, the output
// norm and the output projection, and one row of the embedding (not
// counted). Sizes from the model's published shape, not from the file.
func TestDecodeWeightBytes(t *testing.T) {
	f, err := gguf.Open(testenv.Shared(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const embd, ff, layers, kvDim, vocab = 64, 172, 5, 32, 512
	perLayer := embd*embd*2 + embd*kvDim*2 + embd*ff*3 + 2*embd
	want := uint64(4 * (layers*perLayer + embd + embd*vocab))
	if got := decodeWeightBytes(f); got != want {
		t.Errorf("decode weight bytes %d, want %d", got, want)
	}
}

// The read-bandwidth buffer must have every page written: reads of pages
// never written map the kernel's shared zero page, which stays in cache
// and overstates the bandwidth 3-4x.
func TestReadBufferPagesWritten(t *testing.T) {
	const n = 64<<12 + 100
	buf, free := readBuffer(n)
	defer free()
	if len(buf) != n {
		t.Fatalf("%d bytes, want %d", len(buf), n)
	}
	for p := 0; p < n; p += 4096 {
		page := buf[p:min(p+4096, n)]
		zero := true
		for _, b := range page {
			if b != 0 {
				zero = false
				break
			}
		}
		if zero {
			t.Fatalf("page at %d never written", p)
		}
	}
}

// TestDecodeWeightBytesMoE: in a glm4moe file a decode step reads
// expert_used_count/expert_count of each stacked expert tensor and nothing
// of the nextn layer: computed here from the shape (F32, so 4 bytes a
// parameter), not from the file's tensor sizes.
func TestDecodeWeightBytesMoE(t *testing.T) {
	const embd, heads, kv, hd, ff, experts, used, eff, layers, vocab = 64, 4, 2, 32, 128, 8, 2, 64, 3, 514
	var b bytes.Buffer
	err := synth.Write(&b, synth.Spec{Arch: "glm4moe", Layers: layers, Embd: embd, Heads: heads, KVHeads: kv, FF: ff, Context: 256, Type: quant.F32, Seed: 1,
		MoE: synth.MoESpec{HeadDim: hd, RopeDim: 16, Experts: experts, ExpertsUsed: used, ExpertFF: eff, SharedExperts: 1, DenseLayers: 1, NextN: 1}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	q, k := heads*hd, kv*hd
	attn := embd*q*2 + embd*k*2 + q + 2*k + 2*embd // q, o, k, v, biases, two norms
	dense := 3 * embd * ff
	moe := embd*experts + experts + used*3*embd*eff + 3*embd*eff // router, bias, routed, shared
	want := uint64(4 * (layers*attn + dense + (layers-1)*moe + embd + embd*vocab))
	if got := decodeWeightBytes(f); got != want {
		t.Errorf("decode weight bytes %d, want %d", got, want)
	}
}

// TestLlamaBenchArgsCacheType: llama-bench gets sluice's KV type as
// -ctk/-ctv (nothing for f16, its default) and flash attention on for a
// quantized cache, which llama.cpp needs for a q8_0 V cache.
func TestLlamaBenchArgsCacheType(t *testing.T) {
	for _, c := range []struct {
		typ  kv.Type
		want string
	}{
		{kv.F16, "-m m.gguf -p 0 -n 32 -d 8192 -t 2 -r 1 -o json"},
		{kv.F32, "-m m.gguf -p 0 -n 32 -d 8192 -t 2 -r 1 -o json -ctk f32 -ctv f32"},
		{kv.Q8_0, "-m m.gguf -p 0 -n 32 -d 8192 -t 2 -r 1 -o json -ctk q8_0 -ctv q8_0 -fa on"},
	} {
		if got := strings.Join(llamaBenchArgs("m.gguf", 2, 0, 32, 8192, c.typ), " "); got != c.want {
			t.Errorf("%v: %q, want %q", c.typ, got, c.want)
		}
	}
}
