package tcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/handoff/handofftest"
)

// The watchdog's judgement on a clock of its own: on-time wakes declare a
// silent peer dead at the first wake past the limit; a stall of this side
// (one wake three limits late) counts only two ping intervals, and the
// peer's next byte clears it; when every wake is late, a silent peer is
// still declared dead, after a few wakes; a reader holding off is never
// silence.
func TestHeartbeatWatchCountsWatchedSilence(t *testing.T) {
	const dead = 800 * time.Millisecond
	every := dead / 8
	t0 := time.Unix(1000, 0)

	w := newWatch(dead, t0)
	for k := 1; ; k++ {
		_, d := w.wake(t0.Add(time.Duration(k)*every), t0, false)
		if d != (k > 8) {
			t.Fatalf("on time, silent %d ping intervals: dead %v", k, d)
		}
		if d {
			break
		}
	}

	w = newWatch(dead, t0)
	now := t0.Add(every)
	w.wake(now, t0, false)
	now = now.Add(3 * dead) // this side stalled; the peer's ping waits in the socket
	if s, d := w.wake(now, t0, false); d || s > every+dead/4 {
		t.Fatalf("a stall of this side of %v counted as %v of the peer's silence (dead %v)", 3*dead, s, d)
	}
	recv := now.Add(time.Millisecond) // the reader runs and reads it
	for k := 1; k <= 6; k++ {
		if s, d := w.wake(now.Add(time.Duration(k)*every), recv, false); d || s >= time.Duration(k)*every {
			t.Fatalf("after the stall, the peer heard from: silent %v, dead %v", s, d)
		}
	}

	w = newWatch(dead, t0)
	wakes := 0
	for now = t0; ; wakes++ {
		now = now.Add(dead) // every wake a whole limit late
		if _, d := w.wake(now, t0, false); d {
			break
		}
		if wakes > 8 {
			t.Fatal("a silent peer was never declared dead while every wake was late")
		}
	}
	if wakes < 3 {
		t.Fatalf("declared dead at the late wake %d: the late gaps counted whole", wakes+1)
	}

	w = newWatch(dead, t0)
	if _, d := w.wake(t0.Add(10*dead), t0, true); d {
		t.Fatal("declared dead while the reader held off reading")
	}
}

// stallChildEnv marks the re-executed test binary as the stalled process.
const stallChildEnv = "SLUICE_TCP_STALL_CHILD"

// TestHeartbeatSurvivesOwnStall: a process stopped while both ends of its
// connections are alive (its CPU share starved, a cgroup throttle, a GC,
// here SIGSTOP) must not declare its peers dead when it runs again: their
// pings wait unread in the sockets, and the watchdog may wake before the
// reader. The test runs a server and clients over loopback in a child
// process (heartbeat limit 300 ms), stops it 4 times for 3 limits each, and
// requires every connection alive after. Before the watchdog counted only
// watched silence, one of the 16 connection ends declared its peer dead in
// most runs (the flake of TestOracleArchTransports under load).
func TestHeartbeatSurvivesOwnStall(t *testing.T) {
	const dead = 300 * time.Millisecond
	if os.Getenv(stallChildEnv) == "1" {
		stallChild(t, dead)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHeartbeatSurvivesOwnStall$", "-test.count=1")
	cmd.Env = append(os.Environ(), stallChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the child did not start: %q %v; stderr: %s", line, err, stderr.String())
	}
	for range 4 {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * dead)
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(dead) // running: pings go and are read
	}
	stdin.Close()
	rest, _ := io.ReadAll(out)
	werr := cmd.Wait()
	if werr != nil || !strings.Contains(string(rest), "alive") {
		t.Fatalf("after 4 stops of its own process, the child's connections: %s(exit %v)\nstderr: %s", rest, werr, stderr.String())
	}
}

// stallChild serves 8 clients over loopback, says ready, waits for stdin
// to close (stopped and continued meanwhile), and reports any connection
// that died.
func stallChild(t *testing.T, dead time.Duration) {
	var mu sync.Mutex
	var died []string
	r := handofftest.New(t, handofftest.Options{})
	addr, s := serve(t, Config{Secret: secret, DeadAfter: dead}, r.Server, nil)
	s.OnError = func(_ net.Addr, err error) {
		mu.Lock()
		died = append(died, "server: "+err.Error())
		mu.Unlock()
	}
	var cs []*Client
	for range 8 {
		cs = append(cs, dial(t, addr, Config{Secret: secret, DeadAfter: dead}))
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for i, c := range cs {
		if err := c.Err(); err != nil {
			died = append(died, fmt.Sprintf("client %d: %v", i, err))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(died) > 0 {
		fmt.Printf("%d connection ends died:\n%s\n", len(died), strings.Join(died, "\n"))
		os.Exit(1)
	}
	fmt.Println("alive")
}
