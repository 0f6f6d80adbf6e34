package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
)

func TestProcCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 1234, stime 66 ticks.
	stat := "4242 (sluice (x) y) S 1 4242 4242 0 -1 4194560 2599 0 0 0 1234 66 0 0 20 0 9 0 123456 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	got, err := procCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 13 * time.Second; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 sluice S 1", "4242 (sluice) S 1 2 3", "4242 (s) S 1 4242 4242 0 -1 4194560 2599 0 0 0 x 66 0"} {
		if _, err := procCPU(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// This process has used some CPU, and the figure only grows.
	a, err := pidCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for i := 0; i < 1e7; i++ {
		_ = i * i
	}
	if b, _ := pidCPU(os.Getpid()); b < a {
		t.Fatalf("CPU time went back: %v then %v", a, b)
	}
}

func TestDecodePicks(t *testing.T) {
	body := `# HELP sluice_cluster_picks_total x
sluice_cluster_picks_total{role="decode",worker="127.0.0.1:1"} 30
sluice_cluster_picks_total{role="decode",worker="127.0.0.1:2"} 10
sluice_cluster_picks_total{role="prefill",worker="127.0.0.1:2"} 99
`
	got, err := decodePicks(body, []string{"127.0.0.1:2", "127.0.0.1:1"})
	if err != nil || len(got) != 2 || got[0] != 10 || got[1] != 30 {
		t.Fatalf("got %v %v, want [10 30]", got, err)
	}
	if b := balance(got); b != 3 {
		t.Fatalf("balance %v, want 3", b)
	}
	if b := balance([]int{5, 0}); b != 0 {
		t.Fatalf("balance with an idle worker %v, want 0", b)
	}
	if _, err := decodePicks(body, []string{"127.0.0.1:3"}); err == nil {
		t.Fatal("a worker the router does not list was found")
	}
}

// The benchmark end to end on a small load: every request is answered,
// the picks of each run add up to its requests (one worker takes them
// all; two share them), and the router's CPU is measured apart.
func TestBenchClusterEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errOut bytes.Buffer
	code := Run([]string{"cluster", "--sluice", sluiceBinary(t), "--model", model, "--decode", "1,2",
		"--requests", "12", "--concurrency", "3", "--prompt", "8", "--gen", "5", "--timeout", "3m", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	var rep clusterReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	for i, r := range rep.Rows {
		sum := 0
		for _, p := range r.Picks {
			sum += p
		}
		if r.DecodeWorkers != i+1 || len(r.Picks) != i+1 || sum != 12 || r.OK != 12 || r.Errors != 0 || r.OutTokens != 60 {
			t.Errorf("row %d: %+v, want %d workers sharing 12 OK requests of 5 tokens", i, r, i+1)
		}
		// CPU comes in 10 ms ticks: this small a load may read 0.
		if r.RouterCPUms < 0 || r.WorkersCPUms < 0 || r.TokS <= 0 {
			t.Errorf("row %d: figures %+v", i, r)
		}
	}
	if rep.Rows[0].MaxMin != 1 {
		t.Errorf("one worker: max/min %v, want 1", rep.Rows[0].MaxMin)
	}
}

func TestRoleLine(t *testing.T) {
	for _, c := range []struct {
		line      string
		want      roleAddrs
		listening bool
		ok        bool
	}{
		{`{"msg":"` + boundMsg + `","process":"router","addr":"http://127.0.0.1:41000","admin":"http://127.0.0.1:41001"}`,
			roleAddrs{api: "http://127.0.0.1:41000", admin: "http://127.0.0.1:41001"}, false, true},
		{`{"msg":"` + boundMsg + `","process":"decode","admin":"http://127.0.0.1:41002"}`, roleAddrs{admin: "http://127.0.0.1:41002"}, false, true},
		{`{"msg":"listening","process":"decode","addr":"127.0.0.1:41003","encrypt":false}`, roleAddrs{listen: "127.0.0.1:41003"}, true, true},
		{`{"msg":"` + boundMsg + `","addr":"http://127.0.0.1:41000"}`, roleAddrs{}, false, false}, // no admin listener
		{`{"msg":"request","addr":"x"}`, roleAddrs{}, false, false},
		{`not json`, roleAddrs{}, false, false},
	} {
		a, l, ok := roleLine([]byte(c.line))
		if ok != c.ok || (ok && (a != c.want || l != c.listening)) {
			t.Errorf("%s: got %+v %v %v, want %+v %v %v", c.line, a, l, ok, c.want, c.listening, c.ok)
		}
	}
}

// The CI flake "no picks of decode worker": the router's admin port,
// picked free by the harness and closed, was bound by another process
// before the router (which then exited: address in use), and that
// process answered /ready and /metrics. A 200 from the address is not
// taken as the child's readiness once the child has exited.
func TestWaitReadyRefusesAnswerAfterChildExited(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer other.Close()
	s, err := startServer("child", os.Args[0], []string{"-test.run", "^$"}, nil, nil) // exits at once
	if err != nil {
		t.Fatal(err)
	}
	<-s.exited
	s.base = other.URL
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.waitReady(ctx, "/ready"); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("waitReady took another server's 200 for an exited child's: %v", err)
	}
}

// Every address the cluster harness talks to is a listener the role's
// own process holds (read from /proc): the child binds port 0 and logs
// what it bound, so no port is picked free beforehand for another
// process to take.
func TestStartRoleAddressesAreTheChilds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, sluiceBinary(t), model, 1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	check := func(s *server, addrs ...string) {
		for _, a := range addrs {
			if pid := s.cmd.Process.Pid; !holdsListener(t, pid, strings.TrimPrefix(a, "http://")) {
				t.Errorf("%s (pid %d) does not hold a listener on %s", s.name, pid, a)
			}
		}
	}
	check(c.router, c.router.base, c.admin)
	check(c.workers[0], c.workers[0].base, c.decodes[0])
	check(c.workers[1], c.workers[1].base)
}

// holdsListener reports whether process pid holds a TCP socket listening
// on addr (127.0.0.1:port), from /proc/<pid>/net/tcp and its fds.
func holdsListener(t *testing.T, pid int, addr string) bool {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	want := fmt.Sprintf("0100007F:%04X", ap.Port())
	inode := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 9 && f[1] == want && f[3] == "0A" { // 0A: LISTEN
			inode = f[9]
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}
