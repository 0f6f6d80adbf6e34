package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
)

// deadSilence finds a heartbeat's declaration in a role's log and the
// silence it counted (handoff/tcp's watchdog).
var deadSilence = regexp.MustCompile(`sent nothing for ([0-9.]+[µnm]?s) \(heartbeat limit [^)]*\): declared dead`)

// cpuCgroup is a CPU cgroup made for one test (v1's cpu controller, or
// v2's cpu.max), removed at its end.
type cpuCgroup struct {
	dir string
	v2  bool
}

// newCPUCgroup makes a cgroup that lets its processes run pct percent of
// one CPU: quota pct ms per 100 ms period (the kernel's default period),
// so a throttled process is frozen for up to 100-pct ms at a time. Where
// no writable CPU controller exists it skips, saying why (and fails under
// CI, which runs as root with one).
func newCPUCgroup(t *testing.T, pct int) *cpuCgroup {
	t.Helper()
	why := ""
	cg := &cpuCgroup{}
	name := fmt.Sprintf("sluice-test-%d", os.Getpid())
	switch {
	case os.Geteuid() != 0:
		why = "not root: making a cgroup needs it"
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		cg.dir = filepath.Join("/sys/fs/cgroup/cpu", name)
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
		if !strings.Contains(string(b), "cpu") {
			why = "cgroup v2 without the cpu controller enabled for children (cgroup.subtree_control)"
		}
		cg.dir, cg.v2 = filepath.Join("/sys/fs/cgroup", name), true
	default:
		why = "no cgroup CPU controller mounted at /sys/fs/cgroup"
	}
	if why == "" {
		if err := os.Mkdir(cg.dir, 0o755); err != nil {
			why = err.Error()
		} else {
			t.Cleanup(func() {
				// The processes in it were stopped by their own cleanups
				// (registered later, so run earlier).
				for range 100 {
					if os.Remove(cg.dir) == nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
			var err error
			if cg.v2 {
				err = os.WriteFile(filepath.Join(cg.dir, "cpu.max"), []byte(fmt.Sprintf("%d 100000", pct*1000)), 0o644)
			} else if err = os.WriteFile(filepath.Join(cg.dir, "cpu.cfs_period_us"), []byte("100000"), 0o644); err == nil {
				err = os.WriteFile(filepath.Join(cg.dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(pct*1000)), 0o644)
			}
			if err != nil {
				why = "setting the CPU quota: " + err.Error()
			}
		}
	}
	if why != "" {
		if testenv.Required() {
			t.Fatalf("cannot make a CPU cgroup here (%s); CI runs as root with one and must run this test", why)
		}
		t.Skipf("SKIPPED: %s; this test did NOT run", why)
	}
	return cg
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// add moves every thread of pid into the cgroup.
func (cg *cpuCgroup) add(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("moving %d into %s: %v", pid, cg.dir, err)
	}
}

// throttled is how many periods the kernel throttled the cgroup in.
func (cg *cpuCgroup) throttled(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "nr_throttled "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no nr_throttled in %s:\n%s", cg.dir, b)
	return 0
}

// The heartbeat's rule, slow is not dead, with a real CPU starvation: a
// decode worker throttled by a cgroup to 5% of one CPU (frozen up to 95 ms
// in every 100) keeps serving, every stream exact and no connection to it
// declared dead, while the kernel throttles it; the same worker stopped
// with SIGSTOP is declared dead within --peer-timeout plus a ping
// interval.
func TestThrottledPeerLivesStoppedPeerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	cg := newCPUCgroup(t, 5)
	const peerTimeout = time.Second
	model := testenv.Shared(t, "models/stories260K.gguf")
	pool := []string{"--model", model, "--context", "256", "--kv-pool-tokens", "1024", "--peer-timeout", peerTimeout.String()}
	dec := startProc(t, "decode", append(pool, "--listen", "127.0.0.1:0")...)
	daddr := dec.waitAddr(t)
	cg.add(t, dec.cmd.Process.Pid)
	stopped := false
	t.Cleanup(func() {
		if stopped {
			dec.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	pre := startProc(t, "prefill", append(pool, "--listen", "127.0.0.1:0", "--decode", daddr)...)
	paddr := pre.waitAddr(t)
	rt := startProc(t, "router", "--model", model, "--context", "256", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--prefill", paddr, "--decode", daddr, "--probe-interval", "100ms", "--peer-timeout", peerTimeout.String())
	raddr := rt.waitAddr(t)
	waitStatus(t, "http://"+raddr+"/ready", 200, "router ready")
	cl := openai.NewClient(option.WithBaseURL("http://"+raddr+"/v1/"), option.WithMaxRetries(0))
	// ../shared/reference/reference.json, stories260K, "Once upon a time".
	want := ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"

	// Load for a few seconds: enough for the quota to bite many times.
	before := cg.throttled(t)
	began := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	n := 0
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(began) < 4*time.Second; i++ {
				st := cl.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "stories260K",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
				var text strings.Builder
				for st.Next() {
					if ch := st.Current(); len(ch.Choices) > 0 {
						text.WriteString(ch.Choices[0].Text)
					}
				}
				mu.Lock()
				n++
				if err := st.Err(); err != nil || text.String() != want {
					problems = append(problems, fmt.Sprintf("client %d request %d: %q %v", c, i, text.String(), err))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	throttled := cg.throttled(t) - before
	if len(problems) > 0 {
		t.Fatalf("%d of %d requests to the throttled decode worker went wrong:\n%s\nrouter log:\n%s", len(problems), n, strings.Join(problems, "\n"), rt.log())
	}
	if throttled < 5 {
		t.Fatalf("the cgroup throttled the decode worker in %d periods only: the test did not starve it", throttled)
	}
	for _, p := range []*proc{rt, pre, dec} {
		if l := p.log(); strings.Contains(l, "declared dead") {
			t.Fatalf("a throttled but live decode worker was declared dead (%s's log):\n%s", p.name, l)
		}
	}
	admin := rt.field("metrics listening", "addr")
	if d := metricValue(t, get(t, admin), `sluice_cluster_worker_down_total{role="decode",worker="`+daddr+`"}`); d != 0 {
		t.Fatalf("the throttled decode worker was marked down %v times", d)
	}
	t.Logf("throttled to 5%%: %d requests exact, the kernel throttled it in %d periods, no connection declared dead", n, throttled)

	// Stopped: declared dead (the connections are idle now, so only the
	// heartbeat can tell) at the first watchdog wake past --peer-timeout
	// of watched silence: judged by the silence the declaring role counted,
	// which its log line names ("sent nothing for D"), not by the wall
	// clock. On a loaded machine that role's wakes come late, and only a
	// quarter of --peer-timeout of a late wake's gap counts as the peer's
	// silence, so the wall time to the line grows with the load; the wall
	// clock only bounds a hang.
	stopAt := time.Now()
	dec.cmd.Process.Signal(syscall.SIGSTOP)
	stopped = true
	var took, silence time.Duration
	for took == 0 && time.Since(stopAt) < 30*time.Second {
		for _, p := range []*proc{rt, pre} {
			if m := deadSilence.FindStringSubmatch(p.log()); m != nil && took == 0 {
				took = time.Since(stopAt)
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatalf("%s's log: %q: %v", p.name, m[0], err)
				}
				silence = d
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took == 0 {
		t.Fatalf("the stopped decode worker was not declared dead within 30 s\nrouter log:\n%s", rt.log())
	}
	if silence > peerTimeout+peerTimeout/4 {
		t.Fatalf("the stopped decode worker was declared dead after %v of watched silence (%v of wall time), want at the first wake past --peer-timeout %v\nrouter log:\n%s",
			silence, took, peerTimeout, rt.log())
	}
	t.Logf("stopped with SIGSTOP: declared dead after %v of watched silence, %v of wall time (--peer-timeout %v)", silence, took.Round(time.Millisecond), peerTimeout)
}
