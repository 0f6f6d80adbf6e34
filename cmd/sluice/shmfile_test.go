package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// A signal during start-up ends the process with os.Exit, which runs no
// defer: the shm transport's pool file must still go. guardFile holds the
// exit off while the file is being created and the exit removes it.
func TestSignalDuringStartupRemovesGuardedFile(t *testing.T) {
	defer func(f func(int)) { exitProcess = f }(exitProcess)
	exited := make(chan int, 1)
	exitProcess = func(code int) { exited <- code }
	s := catchSignals(slog.New(slog.DiscardHandler))
	defer s.stop()
	s.loaded()
	path := filepath.Join(t.TempDir(), "sluice-decode-pool-test")
	creating, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.guardFile(path, func() error {
			err := os.WriteFile(path, []byte("pool"), 0o600)
			close(creating)
			<-release
			return err
		})
	}()
	<-creating
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("the process exited while the file was being created")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("exit code %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the signal never ended the start-up")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the guarded file is still there after the start-up exit: %v", err)
	}
}

// shmPoolOf returns the shm pool file pid holds open (kv keeps it open,
// locked, for the pool's life), or "".
func shmPoolOf(pid int) string {
	fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fd", "*"))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.Contains(filepath.Base(l), "sluice-decode-pool-") {
			return l
		}
	}
	return ""
}

// `sluice serve --transport shm` leaves no pool file behind in /dev/shm
// when it is stopped with SIGTERM at once after it created the file
// (during start-up, or, if it got that far, draining), and a serve
// started after one killed with kill -9 (which cannot remove anything)
// removes the dead one's file, never a live one's.
func TestServeShmPoolFileGoesOnEveryExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm on this host")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	args := []string{"--model", model, "--context", "256", "--kv-pool-tokens", "1024", "--transport", "shm", "--listen", "127.0.0.1:0"}
	waitFile := func(p *proc) string {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			if f := shmPoolOf(p.cmd.Process.Pid); f != "" {
				return f
			}
			select {
			case <-p.done:
				t.Fatalf("exited before it created its pool file:\n%s", p.log())
			case <-time.After(time.Millisecond):
			}
		}
		t.Fatalf("no pool file within a minute:\n%s", p.log())
		return ""
	}
	phases := map[string]int{}
	for range 3 {
		p := startProc(t, "serve", args...)
		f := waitFile(p)
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit code %d after SIGTERM:\n%s", code, p.log())
		}
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after SIGTERM (%v):\n%s", f, err, p.log())
		}
		if strings.Contains(p.log(), "shutting down during start-up") {
			phases["start-up"]++
		} else {
			phases["drain"]++
		}
	}
	t.Logf("SIGTERM as the pool file appeared: %v", phases)

	dead := startProc(t, "serve", args...)
	deadFile := waitFile(dead)
	dead.waitAddr(t)
	live := startProc(t, "serve", args...)
	liveFile := waitFile(live)
	live.waitAddr(t)
	dead.cmd.Process.Kill()
	dead.wait(t)
	if _, err := os.Stat(deadFile); err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	next := startProc(t, "serve", args...)
	next.waitAddr(t)
	// (Another process starting meanwhile may be the one that removed it.)
	t.Logf("the restarted serve logged removing %s: %v", deadFile, strings.Contains(next.log(), deadFile))
	if _, err := os.Stat(deadFile); !os.IsNotExist(err) {
		t.Errorf("%s of the killed serve is still there: %v", deadFile, err)
	}
	if _, err := os.Stat(liveFile); err != nil {
		t.Errorf("the live serve's %s was removed: %v", liveFile, err)
	}
}
