package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// roleSignals catches SIGTERM and SIGINT for a serving role's whole life,
// from its first log line. Before the role serves, a signal ends the
// process at once: a model can take minutes to load (or download), and
// nothing is in flight yet, so the log says which phase it cut
// ("shutting down during model load", or "during start-up" once the
// model is loaded) and the exit code is 0, a drain's code when it cut
// nothing. Without this, Go's default action ended the process with no
// log line at all. Once the role serves, a signal cancels Drain, which
// the role's serving loop waits on to start its drain.
type roleSignals struct {
	// Drain is cancelled by the first SIGTERM/SIGINT after serving.
	Drain context.Context
	drain context.CancelFunc
	sig   chan os.Signal
	mu    sync.Mutex
	// phase is what a signal cuts now; "" once serving.
	phase string
}

// exitProcess ends the process (os.Exit).
var exitProcess = os.Exit

// catchSignals starts catching SIGTERM and SIGINT; stop lets go of them.
func catchSignals(log *slog.Logger) *roleSignals {
	s := &roleSignals{sig: make(chan os.Signal, 1), phase: "model load"}
	s.Drain, s.drain = context.WithCancel(context.Background())
	signal.Notify(s.sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		got, ok := <-s.sig
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.phase != "" {
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

// stop lets go of the signals (the role has returned).
func (s *roleSignals) stop() {
	signal.Stop(s.sig) // no delivery after it returns
	close(s.sig)
	s.drain()
}
