package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sluice/internal/cli"
	"sluice/internal/gguf"
	"sluice/internal/testenv"
)

// `sluice bench cluster`: the router's own CPU per request and the
// balance of its pairing, with 1, 2, 3 ... decode workers under the same
// fixed load. Every role is its own process on loopback (as in a
// cluster), so the router's CPU is read apart from the workers' from
// /proc/<pid>/stat. On a small machine the workers share the cores, so
// aggregate tok/s shows the scheduler's overhead and balance rather than
// speed-up.

// clusterRow is one run: n decode workers.
type clusterRow struct {
	DecodeWorkers int     `json:"decode_workers"`
	Requests      int     `json:"requests"`
	OK            int     `json:"ok"`
	Errors        int     `json:"errors"`
	OutTokens     int     `json:"out_tokens"`
	WallSeconds   float64 `json:"wall_seconds"`
	TokS          float64 `json:"tok_s"`
	// RouterCPUms is the router process's CPU time (user+system) over the
	// measured run, per request; WorkersCPUms the prefill and decode
	// processes' together, per request.
	RouterCPUms  float64 `json:"router_cpu_ms_per_request"`
	WorkersCPUms float64 `json:"workers_cpu_ms_per_request"`
	// Picks is the requests the router sent to each decode worker in the
	// measured run (its sluice_cluster_picks_total), MaxMin their max/min
	// (0 when a worker took none).
	Picks  []int   `json:"picks_per_decode_worker"`
	MaxMin float64 `json:"picks_max_over_min"`
	Error  string  `json:"error,omitempty"`
}

type clusterReport struct {
	Model       string       `json:"model"`
	Threads     int          `json:"threads_per_worker"`
	Prompt      int          `json:"prompt_tokens"`
	Gen         int          `json:"gen_tokens"`
	Concurrency int          `json:"concurrency"`
	NProc       int          `json:"nproc"`
	CPU         string       `json:"cpu"`
	LoadBefore  string       `json:"loadavg_before"`
	LoadAfter   string       `json:"loadavg_after"`
	Rows        []clusterRow `json:"rows"`
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, 100
// on every Linux architecture Go supports (the kernel converts its own HZ).
const userHZ = 100

// procCPU parses /proc/<pid>/stat content: utime + stime, all threads.
// The command name (field 2) is in parentheses and may itself hold spaces
// and parentheses, so the fields are counted after the last ')'.
func procCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command field")
	}
	f := strings.Fields(stat[i+1:])
	// After the command: state(3) ppid(4) ... utime(14) stime(15).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

func pidCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return procCPU(string(b))
}

// decodePicks reads sluice_cluster_picks_total of each decode worker (by
// address) from a Prometheus text body.
func decodePicks(body string, addrs []string) ([]int, error) {
	out := make([]int, len(addrs))
	for i, a := range addrs {
		name := `sluice_cluster_picks_total{role="decode",worker="` + a + `"} `
		found := false
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, name); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil || f < 0 || f > 1e15 {
					return nil, fmt.Errorf("bad sample %q", l)
				}
				out[i], found = int(f), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no picks of decode worker %s in the router's metrics", a)
		}
	}
	return out, nil
}

// balance is max/min of the picks (0 when one worker took none).
func balance(picks []int) float64 {
	if len(picks) == 0 || slices.Min(picks) == 0 {
		return 0
	}
	return float64(slices.Max(picks)) / float64(slices.Min(picks))
}

func getBody(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return string(b), err
}

// clusterProcs is one run's processes.
type clusterProcs struct {
	router  *server
	admin   string // the router's admin base URL (/metrics)
	workers []*server
	decodes []string // decode workers' addresses
}

func (c *clusterProcs) stop() {
	for _, s := range append([]*server{c.router}, c.workers...) {
		if s != nil {
			s.stop()
		}
	}
}

// boundMsg is the line every sluice role logs (at info) once it has
// bound its listeners, before the model loads; "admin" is the admin
// listener's base URL and, for the router, "addr" the API's.
const boundMsg = "bound; loading: requests get 503 model_loading until the server is ready"

// roleAddrs is what a role's process reported binding: admin, the admin
// listener's base URL; api, the router's API base URL; listen, a worker's
// handoff address ("listening").
type roleAddrs struct{ admin, api, listen string }

// roleLine reads one JSON log line of a role: the addresses it names, and
// which line it is (bound or listening; neither: ok false).
func roleLine(line []byte) (a roleAddrs, listening, ok bool) {
	var m struct{ Msg, Addr, Admin string }
	if json.Unmarshal(line, &m) != nil {
		return a, false, false
	}
	switch m.Msg {
	case boundMsg:
		return roleAddrs{admin: m.Admin, api: m.Addr}, false, m.Admin != ""
	case "listening":
		return roleAddrs{listen: m.Addr}, true, m.Addr != ""
	}
	return a, false, false
}

// startRole starts one role listening on loopback port 0 (each listener
// bound by the child itself, so no other process can hold the port it
// uses, as could happen between a port picked free here and the child's
// bind: its /ready and /metrics were then another server's) and returns
// once the child has logged its addresses and its own admin listener
// answers /ready.
func startRole(ctx context.Context, bin, role string, env, args []string) (*server, roleAddrs, error) {
	bound, listening := make(chan roleAddrs, 1), make(chan string, 1)
	s, err := startServer("sluice "+role, bin, append([]string{role, "--log-format", "json", "--log-level", "info",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, args...), env, func(line []byte) {
		a, l, ok := roleLine(line)
		switch {
		case !ok:
		case l:
			trySend(listening, a.listen)
		default:
			trySend(bound, a)
		}
	})
	if err != nil {
		return nil, roleAddrs{}, err
	}
	fail := func(err error) (*server, roleAddrs, error) { s.stop(); return nil, roleAddrs{}, err }
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a, err := awaitLine(rctx, s, bound, "bind its listeners")
	if err != nil {
		return fail(err)
	}
	if role != "router" {
		// A worker binds its handoff listener once the model is loaded.
		if a.listen, err = awaitLine(rctx, s, listening, "listen"); err != nil {
			return fail(err)
		}
	}
	s.base = a.admin
	if err := s.waitReady(rctx, "/ready"); err != nil {
		return fail(err)
	}
	return s, a, nil
}

// trySend sends v unless ch is full (only the first of a kind is kept).
func trySend[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// awaitLine waits for the child s to log what ch receives.
func awaitLine[T any](ctx context.Context, s *server, ch <-chan T, what string) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-s.exited:
		return zero, fmt.Errorf("%s exited before it could %s: %s", s.name, what, s.tail())
	case <-ctx.Done():
		return zero, fmt.Errorf("%s did not %s: %v: %s", s.name, what, ctx.Err(), s.tail())
	}
}

// startCluster starts n decode workers, one prefill worker and a router.
func startCluster(ctx context.Context, bin, model string, n, threads, conc int) (*clusterProcs, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "SLUICE_SECRET="+hex.EncodeToString(secret))
	pool := []string{"--model", model, "--context", "256", "--kv-pool-tokens", strconv.Itoa(max(1024, 256*conc)), "--threads", strconv.Itoa(threads)}
	c := &clusterProcs{}
	fail := func(err error) (*clusterProcs, error) { c.stop(); return nil, err }
	for range n {
		s, a, err := startRole(ctx, bin, "decode", env, pool)
		if err != nil {
			return fail(err)
		}
		c.workers = append(c.workers, s)
		c.decodes = append(c.decodes, a.listen)
	}
	s, pre, err := startRole(ctx, bin, "prefill", env, append(pool, "--decode", strings.Join(c.decodes, ",")))
	if err != nil {
		return fail(err)
	}
	c.workers = append(c.workers, s)
	r, a, err := startRole(ctx, bin, "router", env, []string{"--model", model, "--context", "256",
		"--prefill", pre.listen, "--decode", strings.Join(c.decodes, ","), "--load-log-interval", "0"})
	if err != nil {
		return fail(err)
	}
	c.router, c.admin = r, a.admin
	c.router.base = a.api
	return c, nil
}

// measureCluster runs warm-up then the measured load on one cluster.
func measureCluster(ctx context.Context, c *clusterProcs, l serveLoad, conc, requests int) (clusterRow, error) {
	row := clusterRow{DecodeWorkers: len(c.decodes), Requests: requests}
	client := &http.Client{}
	// Warm-up: connections up, every worker paged in.
	// Its prompts are numbered apart from the measured ones (runLoad's
	// first), so no prefix cache serves the measured run from the warm-up.
	runLoad(ctx, client, c.router.base, l, conc, max(conc, 2*len(c.decodes)), 1<<20)
	before, err := getBody(ctx, c.admin+"/metrics")
	if err != nil {
		return row, err
	}
	p0, err := decodePicks(before, c.decodes)
	if err != nil {
		return row, err
	}
	cpu := func() (router, workers time.Duration, err error) {
		if router, err = pidCPU(c.router.cmd.Process.Pid); err != nil {
			return
		}
		for _, w := range c.workers {
			d, e := pidCPU(w.cmd.Process.Pid)
			if e != nil {
				return 0, 0, e
			}
			workers += d
		}
		return
	}
	r0, w0, err := cpu()
	if err != nil {
		return row, err
	}
	samples, wall := runLoad(ctx, client, c.router.base, l, conc, requests, 0)
	r1, w1, err := cpu()
	if err != nil {
		return row, err
	}
	after, err := getBody(ctx, c.admin+"/metrics")
	if err != nil {
		return row, err
	}
	p1, err := decodePicks(after, c.decodes)
	if err != nil {
		return row, err
	}
	for i := range p1 {
		row.Picks = append(row.Picks, p1[i]-p0[i])
	}
	row.MaxMin = balance(row.Picks)
	for _, s := range samples {
		if s.err != nil {
			row.Errors++
			if row.Error == "" {
				row.Error = s.err.Error()
			}
			continue
		}
		row.OK++
		row.OutTokens += s.tokens
	}
	row.WallSeconds = wall.Seconds()
	if wall > 0 {
		row.TokS = float64(row.OutTokens) / wall.Seconds()
	}
	row.RouterCPUms = float64((r1 - r0).Microseconds()) / 1000 / float64(requests)
	row.WorkersCPUms = float64((w1 - w0).Microseconds()) / 1000 / float64(requests)
	return row, nil
}

func runBenchCluster(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelPath := fs.String("model", "", "GGUF `file` every role loads (default stories260K from testdata/)")
	sluiceBin := fs.String("sluice", "", "sluice `binary` to run the roles with (default: this one)")
	decodeFlag := fs.String("decode", "1,2,3", "comma-separated `counts` of decode workers, one run each")
	threads := fs.Int("threads", 1, "--threads of each worker process")
	prompt := fs.Int("prompt", 32, "prompt `tokens` per request")
	gen := fs.Int("gen", 32, "generated `tokens` per request (max_tokens, ignore_eos)")
	conc := fs.Int("concurrency", 16, "requests in flight")
	requests := fs.Int("requests", 192, "measured `requests` per run (after a warm-up)")
	timeout := fs.Duration("timeout", 20*time.Minute, "bound on the whole benchmark")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench cluster [flags]

For each count of decode workers, starts that many `+"`sluice decode`"+`
processes, one `+"`sluice prefill`"+` and one `+"`sluice router`"+` on loopback,
sends the same fixed load (streaming completions, temperature 0,
ignore_eos) and reports aggregate output tok/s, the router process's CPU
time per request (user+system from /proc/<pid>/stat, apart from the
workers'), the workers' CPU per request, and the balance: the requests
the router sent to each decode worker and their max/min. Linux only.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fs, args, stdout); !ok {
		return code
	}
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(stderr, "sluice bench cluster: "+f+"\n", a...)
		return code
	}
	counts, err := parseInts(*decodeFlag, "decode")
	if err != nil {
		return fail(2, "%v", err)
	}
	if *threads < 1 || *prompt < 1 || *gen < 1 || *conc < 1 || *requests < 1 || *timeout <= 0 {
		return fail(2, "--threads, --prompt, --gen, --concurrency, --requests and --timeout must be positive")
	}
	if *prompt+*gen > 255 || *requests > 100000 || *conc > 256 || slices.Max(counts) > 16 || slices.Min(counts) < 1 {
		return fail(2, "--prompt+--gen at most 255 (the context is 256), --requests at most 100000, --concurrency at most 256, 1 to 16 decode workers")
	}
	if *modelPath == "" {
		p, ok := testenv.Find(filepath.Join("models", "stories260K.gguf"))
		if !ok {
			return fail(2, "no --model given and no stories260K found")
		}
		*modelPath = p
	}
	if *sluiceBin == "" {
		if *sluiceBin, err = os.Executable(); err != nil {
			return fail(1, "%v", err)
		}
	}
	if _, err := pidCPU(os.Getpid()); err != nil {
		return fail(1, "reading CPU time from /proc: %v (Linux only)", err)
	}
	lm, err := openModel(*modelPath, gguf.MemoryMap) // only its vocabulary and context are read
	if err != nil {
		return fail(1, "%v", err)
	}
	vocab := lm.model.Config().Vocab
	lm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep := clusterReport{Model: filepath.Base(*modelPath), Threads: *threads, Prompt: *prompt, Gen: *gen, Concurrency: *conc,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg()}
	l := serveLoad{model: strings.TrimSuffix(filepath.Base(*modelPath), ".gguf"), prompt: *prompt, gen: *gen, vocab: vocab}
	code := 0
	for _, n := range counts {
		fmt.Fprintf(stderr, "bench cluster: %d decode worker(s)...\n", n)
		c, err := startCluster(ctx, *sluiceBin, *modelPath, n, *threads, *conc)
		if err != nil {
			return fail(1, "starting %d decode workers: %v", n, err)
		}
		row, err := measureCluster(ctx, c, l, *conc, *requests)
		c.stop()
		if err != nil {
			return fail(1, "%d decode workers: %v", n, err)
		}
		if row.Errors > 0 {
			code = 1
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.LoadAfter = loadAvg()
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printBenchCluster(stdout, rep)
	}
	return code
}

func printBenchCluster(w io.Writer, rep clusterReport) {
	fmt.Fprintf(w, "model %s, %d thread(s) per worker, prompt %d, %d generated, %d in flight\n", rep.Model, rep.Threads, rep.Prompt, rep.Gen, rep.Concurrency)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "decode\trequests\ttok/s\trouter CPU ms/req\tworkers CPU ms/req\tpicks per decode\tmax/min\terrors\t\n")
	for _, r := range rep.Rows {
		picks := make([]string, len(r.Picks))
		for i, p := range r.Picks {
			picks[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.2f\t%.1f\t%s\t%.2f\t%d\t\n", r.DecodeWorkers, r.Requests, r.TokS, r.RouterCPUms, r.WorkersCPUms,
			strings.Join(picks, "/"), r.MaxMin, r.Errors)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%d decode workers: first error: %s\n", r.DecodeWorkers, r.Error)
		}
	}
}
