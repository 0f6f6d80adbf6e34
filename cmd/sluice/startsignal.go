package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// roleSignals catches SIGTERM, SIGINT and SIGHUP for a serving role's
// whole life, from its first log line. Before the role serves, a signal ends the
// process at once: a model can take minutes to load (or download), and
// nothing is in flight yet, so the log says which phase it cut
// ("shutting down during model load", or "during start-up" once the
// model is loaded) and the exit code is 0, a drain's code when it cut
// nothing. Without this, Go's default action ended the process with no
// log line at all. Once the role serves, a signal cancels Drain, which
// the role's serving loop waits on to start its drain.
//
// SIGHUP reloads what the role was told to reload (--tls-cert and
// --tls-key, --workers-file: each subscribes with notifyHUP); with nothing
// to reload it is logged and ignored. It never ends the process: Go's
// default action did, silently and without a drain, for a worker sent
// SIGHUP with its router (docs/operations.md: "send the pods SIGHUP").
type roleSignals struct {
	// Drain is cancelled by the first SIGTERM/SIGINT after serving.
	Drain context.Context
	drain context.CancelFunc
	sig   chan os.Signal
	mu    sync.Mutex
	// phase is what a signal cuts now; "" once serving.
	phase string
	hup   chan os.Signal
	// hupSubs receive each SIGHUP (notifyHUP), by subscription number.
	hupSubs map[int]chan os.Signal
	hupNext int
	// files are removed by an exit during start-up (guardFile): the
	// defers that remove them on every other path do not run then.
	files []string
}

// guardFile runs create, which creates the file at path, with a start-up
// exit held off until it returns; such an exit then removes path (the shm
// transport's decode pool, which would stay in /dev/shm). An exit before
// create started leaves nothing to remove.
func (s *roleSignals) guardFile(path string, create func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = append(s.files, path)
	return create()
}

// exitProcess ends the process (os.Exit).
var exitProcess = os.Exit

// catchSignals starts catching SIGTERM and SIGINT; stop lets go of them.
func catchSignals(log *slog.Logger) *roleSignals {
	s := &roleSignals{sig: make(chan os.Signal, 1), phase: "model load", hup: make(chan os.Signal, 1), hupSubs: map[int]chan os.Signal{}}
	s.Drain, s.drain = context.WithCancel(context.Background())
	signal.Notify(s.sig, syscall.SIGINT, syscall.SIGTERM)
	signal.Notify(s.hup, syscall.SIGHUP)
	go func() {
		for got := range s.hup {
			s.mu.Lock()
			for _, ch := range s.hupSubs {
				select {
				case ch <- got:
				default: // one still pending covers this one
				}
			}
			n := len(s.hupSubs)
			s.mu.Unlock()
			if n == 0 {
				log.Warn("SIGHUP: nothing to reload, ignored (a role reloads --tls-cert/--tls-key and --workers-file on SIGHUP once it has started); stop it with SIGTERM")
			}
		}
	}()
	go func() {
		got, ok := <-s.sig
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.phase != "" {
			for _, f := range s.files {
				if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
					log.Warn("cannot remove a file of this process", "path", f, "err", err)
				}
			}
			log.Info("shutting down during "+s.phase+": nothing is in flight yet", "signal", got.String(), "exit_code", 0)
			exitProcess(0)
		}
		s.drain()
	}()
	return s
}

// loaded says the model is loaded: a signal now cuts the start-up.
func (s *roleSignals) loaded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = "start-up"
}

// serving says the role serves: a signal from now on starts its drain.
func (s *roleSignals) serving() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = ""
}

// notifyHUP returns a channel that receives each SIGHUP from now on, as
// signal.Notify's would (one pending at most), until stop is called.
func (s *roleSignals) notifyHUP() (ch <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.hupNext
	s.hupNext++
	s.hupSubs[id] = c
	return c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.hupSubs, id)
	}
}

// stop lets go of the signals (the role has returned).
func (s *roleSignals) stop() {
	signal.Stop(s.sig) // no delivery after it returns
	signal.Stop(s.hup)
	close(s.sig)
	close(s.hup)
	s.drain()
}
