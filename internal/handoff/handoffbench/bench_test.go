package handoffbench

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/handoff/inproc"
	"sluice/internal/handoff/shm"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// A long prompt of a mid-sized model: 8 layers, KV dim 256, 16-slot pages
// (256 KiB), 4096 tokens = 64 MiB of KV in F32 pages (BenchmarkHandoffKVType:
// F16 pages, half that).
var (
	geo    = kv.Geometry{Layers: 8, KVDim: 256, PageSize: 16, Type: kv.F32}
	tokens = 4096
	batch  = 4 << 20
	window = 2
	// rawChunk is the raw TCP copy's write size, whatever the handoff's batch.
	rawChunk = 4 << 20
	secret   = []byte("0123456789abcdef-bench-secret")
)

// shmPath is where the decode pool's shared file goes: tmpfs, as a
// deployment would put it (kv.Config.SharedFile), when the machine has one;
// a disk-backed file adds writeback to every one-sided write.
func shmPath(b *testing.B) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		f, err := os.CreateTemp("/dev/shm", "sluice-bench-*.kv")
		if err == nil {
			f.Close()
			b.Cleanup(func() { os.Remove(f.Name()) })
			return f.Name()
		}
	}
	return filepath.Join(b.TempDir(), "kv.shm")
}

func init() {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH")); err == nil && v > 0 {
		batch = v
	}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_WINDOW")); err == nil && v > 0 {
		window = v
	}
}

func totalBytes() int { return tokens / geo.PageSize * geo.PageBytes() }

// commitClock notes when the commit is sent: the end of the transfer
// proper (every write applied), before the digest verification.
type commitClock struct {
	handoff.Decode
	at time.Time
}

func (c *commitClock) Commit(ctx context.Context, m *handoff.Commit) error {
	c.at = time.Now()
	return c.Decode.Commit(ctx, m)
}

// handoffOnce moves one prefilled sequence through d and releases the
// decode pages; it returns the time from Reserve to the accepted Commit
// and the time from Reserve to the commit being sent (transfer only).
func handoffOnce(b *testing.B, r *handofftest.Rig, dec handoff.Decode, src *handoff.PoolSource, n int) (time.Duration, time.Duration) {
	return handoffBatch(b, r, dec, src, n, batch)
}

// handoffBatch is handoffOnce with write batches of at most batchBytes.
func handoffBatch(b *testing.B, r *handofftest.Rig, dec handoff.Decode, src *handoff.PoolSource, n, batchBytes int) (time.Duration, time.Duration) {
	ctx := context.Background()
	id := handofftest.ID(n)
	d := &commitClock{Decode: dec}
	start := time.Now()
	res, err := d.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "bench", PromptTokens: tokens})
	if err != nil {
		b.Fatal(err)
	}
	s, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: batchBytes, Window: window}, res, tokens, 1, handoff.PrefetchDigest(src))
	if err != nil {
		b.Fatal(err)
	}
	if err := handoff.Push(ctx, s, d); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	if err := r.Dec.Release(id); err != nil {
		b.Fatal(err)
	}
	return el, d.at.Sub(start)
}

func rawTCP(b *testing.B) (func() time.Duration, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, totalBytes())
	src := make([]byte, totalBytes())
	for i := range src {
		src[i] = byte(i)
	}
	done := make(chan struct{})
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			for off := 0; off < len(dst); off += rawChunk {
				if _, err := io.ReadFull(c, dst[off:off+rawChunk]); err != nil {
					return
				}
			}
			// One byte back: the whole transfer has landed.
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	run := func() time.Duration {
		start := time.Now()
		for off := 0; off < len(src); off += rawChunk {
			if _, err := c.Write(src[off : off+rawChunk]); err != nil {
				b.Fatal(err)
			}
		}
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	return run, func() { c.Close(); l.Close(); close(done) }
}

// runs collects the interleaved timings of one benchmark.
type runs struct{ raw, h, xfer []time.Duration }

func (r *runs) add(raw, h, xfer time.Duration) {
	r.raw, r.h, r.xfer = append(r.raw, raw), append(r.h, h), append(r.xfer, xfer)
}

func sum(ds []time.Duration) (t time.Duration) {
	for _, d := range ds {
		t += d
	}
	return t
}

// medianRatio is the median over iterations of raw_i/h_i: each pair is
// timed back to back, so a load spike on the shared machine skews one pair,
// not the figure.
func medianRatio(raw, h []time.Duration) float64 {
	rs := make([]float64, len(raw))
	for i := range raw {
		rs[i] = raw[i].Seconds() / h[i].Seconds()
	}
	slices.Sort(rs)
	if n := len(rs); n%2 == 0 {
		return (rs[n/2-1] + rs[n/2]) / 2
	}
	return rs[len(rs)/2]
}

// report: GB/s and ratio are end to end (reserve to verified commit);
// xfer-ratio stops when the commit is sent (every write applied, digests
// not yet compared). ratio and xfer-ratio are over the summed times;
// ratio-med and xfer-med are medians of per-iteration ratios, the steadier
// figure on a loaded machine.
func report(b *testing.B, r *runs) {
	raw, h, xfer := sum(r.raw), sum(r.h), sum(r.xfer)
	gb := float64(totalBytes()) * float64(b.N) / 1e9
	b.ReportMetric(gb/h.Seconds(), "GB/s")
	b.ReportMetric(gb/raw.Seconds(), "raw-GB/s")
	b.ReportMetric(raw.Seconds()/h.Seconds(), "ratio")
	b.ReportMetric(raw.Seconds()/xfer.Seconds(), "xfer-ratio")
	b.ReportMetric(medianRatio(r.raw, r.h), "ratio-med")
	b.ReportMetric(medianRatio(r.raw, r.xfer), "xfer-med")
	b.ReportMetric(0, "ns/op")
}

func benchTCP(b *testing.B, mac bool) {
	r := handofftest.New(b, handofftest.Options{Geometry: geo, Pages: tokens/geo.PageSize + 1})
	s, err := tcp.NewServer(tcp.Config{Secret: secret, Encrypt: mac}, r.Server, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	defer s.Close()
	c, err := tcp.Dial(context.Background(), l.Addr().String(), tcp.Config{Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src := r.Sequence(b, handofftest.ID(-1), "bench", tokens, 9)
	raw, stop := rawTCP(b)
	defer stop()
	handoffOnce(b, r, c, src, -2) // warm up both paths
	raw()
	var rs runs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := raw()
		h, x := handoffOnce(b, r, c, src, i)
		rs.add(t, h, x)
	}
	report(b, &rs)
}

// BenchmarkHandoffTCP: a 64 MiB prompt's KV over the TCP transport (CRC32C
// per frame, XXH3 per page, digests on both sides; "encrypted": AES-256-GCM
// per frame instead of the CRC) vs a raw loopback TCP copy
// of the same bytes into a destination buffer, interleaved in one run.
func BenchmarkHandoffTCP(b *testing.B) {
	b.Run("crc", func(b *testing.B) { benchTCP(b, false) })
	b.Run("encrypted", func(b *testing.B) { benchTCP(b, true) })
}

// tcpSide is one decode rig behind a TCP server and the client dialled to
// it, encrypted or not (BenchmarkHandoffEncrypt).
type tcpSide struct {
	r   *handofftest.Rig
	c   *tcp.Client
	src *handoff.PoolSource
}

func newTCPSide(b *testing.B, encrypt bool) tcpSide {
	r := handofftest.New(b, handofftest.Options{Geometry: geo, Pages: tokens/geo.PageSize + 1})
	s, err := tcp.NewServer(tcp.Config{Secret: secret, Encrypt: encrypt}, r.Server, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	b.Cleanup(func() { s.Close() })
	c, err := tcp.Dial(context.Background(), l.Addr().String(), tcp.Config{Secret: secret, Encrypt: encrypt})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if c.Encrypt() != encrypt {
		b.Fatalf("connection encrypted %v, want %v", c.Encrypt(), encrypt)
	}
	return tcpSide{r, c, r.Sequence(b, handofftest.ID(-1), "bench", tokens, 9)}
}

// prodBatch is the write batch a prefill worker sends in production
// (engine.Config.BatchBytes' default), with the Sender's default window.
const prodBatch = 1 << 20

// BenchmarkHandoffEncrypt: issue 28's figure. Each iteration moves the same
// 64 MiB prompt three ways, back to back in a rotating order so no path
// always runs first: a raw loopback TCP copy of the bytes (4 MiB writes
// into one buffer: no framing, no checksum, no pool), the handoff over
// plain frames (crc) and over encrypted ones (AES-256-GCM), both through
// the real client, server, Receiver and kv pool with production's 1 MiB
// batches (SLUICE_BENCH_BATCH overrides). enc/crc and enc/raw are medians
// of per-iteration ratios of throughput (a load spike on the shared machine
// skews one iteration, not the figure); crc/raw says how honest the crc
// baseline is.
func BenchmarkHandoffEncrypt(b *testing.B) {
	bb := prodBatch
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH")); err == nil && v > 0 {
		bb = v
	}
	plain, sealed := newTCPSide(b, false), newTCPSide(b, true)
	raw, stop := rawTCP(b)
	defer stop()
	// Warm up every path (buffers, pools, the sockets' windows).
	for i := 0; i < 2; i++ {
		raw()
		handoffBatch(b, plain.r, plain.c, plain.src, -2-i, bb)
		handoffBatch(b, sealed.r, sealed.c, sealed.src, -2-i, bb)
	}
	var tr, tp, te []time.Duration
	var cpu [3]time.Duration // the process's CPU time (both sides) per path
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var r, p, e time.Duration
		steps := []func(){
			func() { r = raw() },
			func() { p, _ = handoffBatch(b, plain.r, plain.c, plain.src, i, bb) },
			func() { e, _ = handoffBatch(b, sealed.r, sealed.c, sealed.src, i, bb) },
		}
		for k := range steps {
			j := (i + k) % len(steps)
			c0 := cpuTime()
			steps[j]()
			cpu[j] += cpuTime() - c0
		}
		tr, tp, te = append(tr, r), append(tp, p), append(te, e)
	}
	gb := float64(totalBytes()) * float64(b.N) / 1e9
	b.ReportMetric(gb/sum(tr).Seconds(), "raw-GB/s")
	b.ReportMetric(gb/sum(tp).Seconds(), "crc-GB/s")
	b.ReportMetric(gb/sum(te).Seconds(), "enc-GB/s")
	b.ReportMetric(medianRatio(tp, te), "enc/crc")
	b.ReportMetric(medianRatio(tr, te), "enc/raw")
	b.ReportMetric(medianRatio(tr, tp), "crc/raw")
	// CPU seconds per byte moved, both ends together: what the path costs
	// whatever else the machine runs. On a loaded machine throughput
	// tends to the inverse of it; on an idle one it is the bound when
	// both cores are busy.
	for j, name := range []string{"raw", "crc", "enc"} {
		b.ReportMetric(cpu[j].Seconds()*1e9/(gb*1e9), name+"-cpu-ns/B")
	}
	// The cipher alone, on this core in this run: AES-256-GCM sealing and
	// opening a batch. Encryption adds at least one seal and one open of
	// every byte to the plain path, so with both cores busy enc/crc can
	// reach crc/(crc + seal + open) at most: cpu-bound.
	b.StopTimer()
	seal, open := gcmCost(bb)
	crcCPU := cpu[1].Seconds() * 1e9 / (gb * 1e9)
	b.ReportMetric(seal, "seal-cpu-ns/B")
	b.ReportMetric(open, "open-cpu-ns/B")
	b.ReportMetric(crcCPU/(crcCPU+seal+open), "cpu-bound")
	b.ReportMetric(0, "ns/op")
}

// gcmCost is the CPU time per byte of Go's AES-256-GCM sealing and
// opening n bytes (the transport's cipher, seal.go), best of five rounds.
func gcmCost(n int) (seal, open float64) {
	blk, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		panic(err)
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		panic(err)
	}
	pt, ct := make([]byte, n), make([]byte, 0, n+g.Overhead())
	nonce := make([]byte, g.NonceSize())
	const reps = 64
	seal, open = math.Inf(1), math.Inf(1)
	for range 5 {
		c0 := cpuTime()
		for range reps {
			ct = g.Seal(ct[:0], nonce, pt, nil)
		}
		c1 := cpuTime()
		for range reps {
			if _, err := g.Open(pt[:0], nonce, ct, nil); err != nil {
				panic(err)
			}
		}
		c2 := cpuTime()
		seal = min(seal, float64(c1-c0)/float64(reps*n))
		open = min(open, float64(c2-c1)/float64(reps*n))
	}
	return seal, open
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandoffShm: the same prompt written one-sidedly into the decode
// pool's shared mapping (notices in-process or over TCP) vs a raw memory
// copy of the same bytes, interleaved in one run.
func BenchmarkHandoffShm(b *testing.B) {
	for _, ctl := range []string{"inproc", "tcp"} {
		b.Run(ctl, func(b *testing.B) {
			path := shmPath(b)
			r := handofftest.New(b, handofftest.Options{Geometry: geo, Pages: tokens/geo.PageSize + 1, SharedFile: path})
			var next handoff.Decode = inproc.Decode(r.Server)
			if ctl == "tcp" {
				s, err := tcp.NewServer(tcp.Config{Secret: secret}, r.Server, nil)
				if err != nil {
					b.Fatal(err)
				}
				l, _ := net.Listen("tcp", "127.0.0.1:0")
				go s.Serve(l)
				defer s.Close()
				c, err := tcp.Dial(context.Background(), l.Addr().String(), tcp.Config{Secret: secret})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				next = c
			}
			w, err := shm.Open(path, geo, next)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			src := r.Sequence(b, handofftest.ID(-1), "bench", tokens, 9)
			a := make([]byte, totalBytes())
			dst := make([]byte, totalBytes())
			for i := range a {
				a[i] = byte(i)
			}
			raw := func() time.Duration {
				start := time.Now()
				for off := 0; off < len(a); off += geo.PageBytes() {
					copy(dst[off:off+geo.PageBytes()], a[off:off+geo.PageBytes()])
				}
				return time.Since(start)
			}
			handoffOnce(b, r, w, src, -2)
			raw()
			var rs runs
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := raw()
				h, x := handoffOnce(b, r, w, src, i)
				rs.add(t, h, x)
			}
			report(b, &rs)
		})
	}
}

// kvTypeSide is one KV type's decode rig and TCP client for
// BenchmarkHandoffKVType.
type kvTypeSide struct {
	r   *handofftest.Rig
	c   *tcp.Client
	src *handoff.PoolSource
}

func newKVTypeSide(b *testing.B, t kv.Type) kvTypeSide {
	g := geo
	g.Type = t
	r := handofftest.New(b, handofftest.Options{Geometry: g, Pages: tokens/g.PageSize + 1})
	s, err := tcp.NewServer(tcp.Config{Secret: secret, HoldsKV: true, KVType: t}, r.Server, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	b.Cleanup(func() { s.Close() })
	c, err := tcp.Dial(context.Background(), l.Addr().String(), tcp.Config{Secret: secret, HoldsKV: true, KVType: t})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return kvTypeSide{r, c, r.Sequence(b, handofftest.ID(-1), "bench", tokens, 9)}
}

// BenchmarkHandoffKVType: the same 4096-token prompt of the same model
// shape over the TCP transport with F32 pages (64 MiB) and with F16 pages
// (32 MiB), interleaved pair by pair. f16-speedup is F16 prompts per second
// over F32 prompts per second (the median of per-pair ratios), the
// handoff throughput ratio of the two KV types.
func BenchmarkHandoffKVType(b *testing.B) {
	f32, f16 := newKVTypeSide(b, kv.F32), newKVTypeSide(b, kv.F16)
	handoffOnce(b, f32.r, f32.c, f32.src, -2) // warm up both
	handoffOnce(b, f16.r, f16.c, f16.src, -2)
	var t32, t16 []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h32, _ := handoffOnce(b, f32.r, f32.c, f32.src, i)
		h16, _ := handoffOnce(b, f16.r, f16.c, f16.src, i)
		t32, t16 = append(t32, h32), append(t16, h16)
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/sum(t32).Seconds(), "f32-tok/s")
	b.ReportMetric(float64(tokens)*float64(b.N)/sum(t16).Seconds(), "f16-tok/s")
	b.ReportMetric(medianRatio(t32, t16), "f16-speedup")
	b.ReportMetric(0, "ns/op")
}
