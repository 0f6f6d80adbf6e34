package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/handoff"
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
//
// Both ends of every connection share the child, but not always its CPU:
// on a loaded machine one of its threads can wait for a CPU for longer
// than the limit while another runs, and the goroutines that thread was
// running (a peer's watchdog, which pings) with it. The peer then really
// sent nothing for the limit, and its death is the heartbeat's rule, not
// the stall's doing (seen in 2 of 31 runs at load 13-25: the declaring
// end's watchdog woke on time while its peer's did not wake for 360 ms to
// 1.1 s). So the child judges each death by what the link measured
// (judgeStallDeaths): it fails the test when the peer's last write into
// the socket came less than the limit of watched time before the
// declaration (a live peer, its bytes unread or just read); a death after
// the peer wrote nothing for the limit makes the round void, run again up
// to 3 times.
func TestHeartbeatSurvivesOwnStall(t *testing.T) {
	const dead = 300 * time.Millisecond
	if os.Getenv(stallChildEnv) == "1" {
		stallChild(t, dead)
		return
	}
	for round := 1; ; round++ {
		void := stallRound(t, dead)
		if void == "" {
			return
		}
		if round == 3 {
			t.Fatalf("the machine kept a peer in the test's own child silent past the limit in 3 rounds in a row; last: %s", void)
		}
		t.Logf("round %d void: %s", round, void)
	}
}

// stallRound runs the child through 4 stops. It returns "" when every
// connection lived, or why the round is void; it fails the test when a
// connection end was declared dead wrongly.
func stallRound(t *testing.T, dead time.Duration) string {
	t.Helper()
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
	if void, ok := strings.CutPrefix(string(rest), "void: "); ok && werr == nil {
		return strings.TrimSpace(void)
	}
	if werr != nil || !strings.Contains(string(rest), "alive") {
		t.Fatalf("after 4 stops of its own process, the child's connections: %s(exit %v)\nstderr: %s", rest, werr, stderr.String())
	}
	return ""
}

// stallChild serves 8 clients over loopback, says ready, waits for stdin
// to close (stopped and continued meanwhile), and reports the connections
// that died: "alive", "void: ..." when every death was the heartbeat's
// rule (judgeStallDeaths), or the deaths and exit status 1.
func stallChild(t *testing.T, dead time.Duration) {
	var mu sync.Mutex
	var died []string
	r := handofftest.New(t, handofftest.Options{})
	s, err := NewServer(Config{Secret: secret, DeadAfter: dead, onWake: stallWake}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &stallListener{Listener: l}
	go s.Serve(sl)
	t.Cleanup(func() { s.Close() })
	s.OnError = func(_ net.Addr, err error) {
		mu.Lock()
		died = append(died, "server: "+err.Error())
		mu.Unlock()
	}
	var cs []*Client
	ends := []*stallConn{}
	for range 8 {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc := &stallConn{Conn: nc}
		c, err := NewClient(sc, Config{Secret: secret, DeadAfter: dead, onWake: stallWake})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs, ends = append(cs, c), append(ends, sc)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	mu.Lock() // the server's OnError appends too
	defer mu.Unlock()
	for i, c := range cs {
		if err := c.Err(); err != nil {
			died = append(died, fmt.Sprintf("client %d: %v", i, err))
		}
	}
	if len(died) == 0 {
		fmt.Println("alive")
		return
	}
	sl.mu.Lock()
	ends = append(ends, sl.conns...)
	sl.mu.Unlock()
	wrong, void := judgeStallDeaths(ends, dead)
	if len(wrong) == 0 && len(void) > 0 {
		fmt.Printf("void: %s\n", strings.Join(void, "; "))
		return
	}
	fmt.Printf("%d connection ends died:\n%s\n%s\n", len(died), strings.Join(died, "\n"), strings.Join(wrong, "\n"))
	os.Exit(1)
}

// judgeStallDeaths judges each connection end whose watchdog declared its
// peer dead by the peer's last write into the socket before the
// declaration: wrong when less than dead of watched time had passed since
// (counting at most dead/4 of each of the declaring watchdog's wakes, as
// watch does), void otherwise (the peer sent nothing for the limit). A
// death no watchdog declared (nothing to judge) is wrong.
func judgeStallDeaths(ends []*stallConn, dead time.Duration) (wrong, void []string) {
	byName := map[string]*stallConn{}
	for _, e := range ends {
		byName[e.LocalAddr().String()+"->"+e.RemoteAddr().String()] = e
	}
	for _, e := range ends {
		e.mu.Lock()
		wakes := append([]wake(nil), e.wakes...)
		e.mu.Unlock()
		i := slices.IndexFunc(wakes, func(w wake) bool { return w.dead })
		if i < 0 {
			continue
		}
		d := wakes[i]
		name := e.LocalAddr().String() + "->" + e.RemoteAddr().String()
		peer := byName[e.RemoteAddr().String()+"->"+e.LocalAddr().String()]
		if peer == nil {
			wrong = append(wrong, name+" declared dead a peer that is not in this process")
			continue
		}
		peer.mu.Lock()
		var last time.Time
		for _, w := range peer.writes {
			if !w.After(d.now) {
				last = w
			}
		}
		peer.mu.Unlock()
		prev, watched := last, time.Duration(0)
		for _, w := range wakes[:i+1] {
			if w.now.After(last) {
				watched += min(w.now.Sub(prev), dead/4)
				prev = w.now
			}
		}
		what := fmt.Sprintf("%s declared its peer dead (watched silence %v) %v of watched time (%v of wall time) after the peer's last write, limit %v",
			name, d.silent.Round(time.Millisecond), watched.Round(time.Millisecond), d.now.Sub(last).Round(time.Millisecond), dead)
		if watched < dead {
			wrong = append(wrong, what)
		} else {
			void = append(void, what)
		}
	}
	if len(wrong)+len(void) == 0 {
		wrong = append(wrong, "connections ended and no watchdog declared a peer dead")
	}
	return wrong, void
}

// stallConn is a connection end in the stalled child: it records when
// each write into its socket ended and its watchdog's wakes (stallWake).
type stallConn struct {
	net.Conn
	mu     sync.Mutex
	writes []time.Time
	wakes  []wake
}

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.writes = append(c.writes, time.Now())
	c.mu.Unlock()
	return n, err
}

// SyscallConn reaches the socket (the watchdog looks at its receive
// queue: unread).
func (c *stallConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// stallWake is the child's Config.onWake.
func stallWake(c *conn, w wake) {
	if sc, ok := c.nc.(*stallConn); ok {
		sc.mu.Lock()
		sc.wakes = append(sc.wakes, w)
		sc.mu.Unlock()
	}
}

// stallListener hands out stallConns and keeps them.
type stallListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*stallConn
}

func (l *stallListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &stallConn{Conn: nc}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return c, nil
}

// cancelStallChildEnv gives the re-executed test binary (the stalled
// router) the fake worker's address.
const cancelStallChildEnv = "SLUICE_TCP_CANCEL_STALL_ADDR"

// TestCancelWaitSurvivesOwnStall: a router that gives a prompt up and is
// then stopped for longer than CancelWait (a VM pause, a starved CPU
// share, here SIGSTOP) while the worker's acknowledgement of the close
// waits unread in its socket must not close the connection when it runs
// again: the worker is alive, and the connection carries other tenants'
// calls. The router runs in a child process (CancelWait 1 s, no
// heartbeat); the worker is a fake in this process that reads the close
// frame, waits until every thread of the child is stopped, acknowledges
// the close, and continues the child 2 s later. It then answers the
// prompt and another tenant's call held through the stall; that call and
// a new one after it must complete on the same connection. The child's
// reader hands the acknowledgement on a fifth of CancelWait after reading
// it (a reader scheduled late after the stall): otherwise whether the
// reader or the wait runs first after the stall is up to the scheduler. While the
// cancel wait counted wall time, the child closed the connection ("did
// not confirm giving the call up") as soon as it ran again.
func TestCancelWaitSurvivesOwnStall(t *testing.T) {
	const wait = time.Second
	if addr := os.Getenv(cancelStallChildEnv); addr != "" {
		cancelStallChild(t, addr, wait)
		return
	}
	closed := make(chan struct{}, 1) // the worker read the close frame
	ack := make(chan struct{})       // the child is stopped: acknowledge
	answer := make(chan struct{})    // the child runs again: answer
	werr := make(chan error, 1)
	addr := fakeServer(t, func(nc net.Conn) {
		werr <- cancelStallWorker(nc, closed, ack, answer)
	})
	// Whatever happens, the worker's waits end with the test.
	var ackOnce, answerOnce sync.Once
	doAck := func() { ackOnce.Do(func() { close(ack) }) }
	doAnswer := func() { answerOnce.Do(func() { close(answer) }) }
	defer doAnswer()
	defer doAck()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCancelWaitSurvivesOwnStall$", "-test.count=1")
	cmd.Env = append(os.Environ(), cancelStallChildEnv+"="+addr)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	select {
	case <-closed:
	case err := <-werr:
		t.Fatalf("the worker ended before the close frame: %v", err)
	case err := <-exited:
		t.Fatalf("the child ended before giving the prompt up: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the child never gave the prompt up")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, cmd.Process.Pid)
	doAck() // into the stopped child's socket
	time.Sleep(2 * wait)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	doAnswer()
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil || !strings.Contains(stdout.String(), "alive") {
			var worker error
			select {
			case worker = <-werr:
			default:
			}
			t.Fatalf("after a stop of its own process longer than CancelWait, the router's connection: %s(exit %v, worker %v)\nstderr: %s", stdout.String(), err, worker, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not end")
	}
}

// cancelStallChild is the router: another tenant's call (a Load the
// worker holds), then a prompt given up once sent; it waits for both and
// makes one call more, and says "alive" when the connection stayed up and
// both other calls completed.
func cancelStallChild(t *testing.T, addr string, wait time.Duration) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	lc := &lateConn{Conn: nc}
	c, err := NewClient(lc, Config{Secret: secret, DeadAfter: -1, CancelWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pending := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending)
	}
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	other := make(chan error, 1)
	go func() {
		_, err := c.Load(handoff.WithCaller(ctx, "other", 1))
		other <- err
	}()
	for pending() < 1 {
		time.Sleep(time.Millisecond)
	}
	pctx, cancel := context.WithCancel(ctx)
	given := make(chan error, 1)
	go func() {
		_, err := c.Prefill(pctx, &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
		given <- err
	}()
	for pending() < 2 {
		time.Sleep(time.Millisecond)
	}
	lc.late.Store(int64(wait / 5)) // the next bytes read: the acknowledgement
	cancel()
	gerr, oerr := <-given, <-other
	_, aerr := c.Load(ctx)
	fmt.Printf("the given-up prompt: %v\nthe other tenant's call: %v\na call after: %v\nthe connection: %v\n", gerr, oerr, aerr, c.Err())
	if c.Err() == nil && oerr == nil && aerr == nil {
		fmt.Println("alive")
	}
}

// lateConn holds the bytes of its next read that returns any for late
// (ns), once.
type lateConn struct {
	net.Conn
	late atomic.Int64
}

func (c *lateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if d := c.late.Swap(0); d > 0 {
			time.Sleep(time.Duration(d))
		}
	}
	return n, err
}

// cancelStallWorker is the worker: it reads the child's Load and Prefill
// and the Prefill's close frame (closed), acknowledges the close on ack,
// answers both on answer (the prompt aborted), then answers every Load
// until the child leaves.
func cancelStallWorker(nc net.Conn, closed chan<- struct{}, ack, answer <-chan struct{}) error {
	c := fakeServerConn(nc)
	if c == nil {
		return errors.New("handshake failed")
	}
	load, err := encLoad(&handoff.Load{FreePages: 1, TotalPages: 2})
	if err != nil {
		return err
	}
	var held, prefill uint32
	for closing := false; !closing || held == 0; {
		f, err := c.read()
		if err != nil {
			return err
		}
		switch f.typ {
		case tLoad:
			held = f.stream
		case tPrefill:
			prefill = f.stream
		case tStreamClose:
			if f.stream != prefill {
				return fmt.Errorf("a close frame on call %d, the Prefill is %d", f.stream, prefill)
			}
			closing = true
		default:
			return fmt.Errorf("frame type %d", f.typ)
		}
	}
	closed <- struct{}{}
	<-ack
	if err := c.send(tCloseAck, prefill); err != nil {
		return err
	}
	<-answer
	// After the acknowledgement is read (the reply's arrival is not what
	// the test is about).
	time.Sleep(100 * time.Millisecond)
	if err := c.send(tError, prefill, encError(handoff.ErrAborted.With("given up"))); err != nil {
		return err
	}
	if err := c.send(tLoadRes, held, load); err != nil {
		return err
	}
	for {
		f, err := c.read()
		if err != nil {
			return nil // the child left
		}
		if f.typ == tLoad {
			if err := c.send(tLoadRes, f.stream, load); err != nil {
				return err
			}
		}
	}
}

// waitStopped waits until every thread of process pid is stopped (Linux:
// /proc tells; elsewhere a moment is left for the signal to land).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			return
		}
		stopped := true
		for _, e := range ents {
			b, err := os.ReadFile(dir + "/" + e.Name() + "/stat")
			if err != nil {
				continue // a thread that ended
			}
			// The state follows the command name, in parentheses.
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop")
		}
	}
}
