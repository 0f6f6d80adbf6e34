package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Redialer is a role's handoff service (handoff.Decode and handoff.Prefill)
// over an authenticated connection that is dialled again when it dies, so
// a restarted peer is used again without rebuilding the caller. It never
// retries a call that changes state: a Reserve, Write, Commit, Prefill or
// Stream on a connection that died returns ErrTransport (outcome unknown)
// and the caller decides (normally: Abort, which goes out on a fresh
// connection). The clean-up calls Abort, Drained and Cancel are idempotent
// and are what the caller does about such a failure, so when one of them
// fails because its connection died, it is sent once more on a fresh one:
// otherwise an Abort sent just as the connection dies is lost, and the
// peer holds the handoff's pages (and its stream) until its own timeout.
//
// At most one dial is under way at a time, shared by every caller (calls
// and readiness checks alike), and each caller waits for it only as long
// as its own context lets it: /ready is unauthenticated, so a flood of
// probes while a peer is down must neither queue dials one behind the
// other nor hold tenants' calls behind them.
type Redialer struct {
	addr string
	cfg  Config
	log  *slog.Logger
	// dial is Dial; tests replace it with one that blocks.
	dial func(ctx context.Context, addr string, cfg Config) (*Client, error)

	mu      sync.Mutex
	c       *Client
	pending *dialing // the dial under way, nil when none
	closed  bool
}

// dialing is one dial under way; done closes when c or err is set.
type dialing struct {
	done   chan struct{}
	c      *Client
	err    error
	cancel context.CancelFunc
	// overdue: a caller already waited DeadAfter for this dial in vain (a
	// hung peer: its kernel completed the TCP connect, the handshake
	// gets no answer). Later callers fail at once instead of each waiting
	// DeadAfter again: the router makes its reservations one at a time,
	// and requests paired with the hung worker before it was marked down
	// would otherwise hold that line for DeadAfter each, one after another.
	overdue bool
}

// redialTimeout bounds one dial made on behalf of a call.
const redialTimeout = 5 * time.Second

// NewRedialer returns a Redialer for addr; nothing is dialled yet.
func NewRedialer(addr string, cfg Config) *Redialer {
	return &Redialer{addr: addr, cfg: cfg, log: slog.New(slog.DiscardHandler), dial: Dial}
}

// ConnectRedialer connects to addr, retrying until ctx ends (roles may
// start in any order), and returns a Redialer over that connection that
// logs to log (nil: nowhere) when it loses and re-establishes it.
func ConnectRedialer(ctx context.Context, addr string, cfg Config, log *slog.Logger) (*Redialer, error) {
	c, err := DialRetry(ctx, addr, cfg)
	if err != nil {
		return nil, err
	}
	r := NewRedialer(addr, cfg)
	if log != nil {
		r.log = log
	}
	r.c = c
	return r, nil
}

// DialRetry dials addr until it succeeds, authentication fails (retrying
// cannot fix a wrong secret, I12), the peer runs another model (nor a
// wrong model, I13) or another protocol version (nor another build), or
// ctx ends.
func DialRetry(ctx context.Context, addr string, cfg Config) (*Client, error) {
	for {
		c, err := Dial(ctx, addr, cfg)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, handoff.ErrAuth) || errors.Is(err, handoff.ErrModelMismatch) || errors.Is(err, handoff.ErrVersion) ||
			errors.Is(err, handoff.ErrKVTypeMismatch) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("could not reach %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// client returns the live connection, or waits (bounded by ctx) for the
// one dial under way, starting it if none is. The dial itself is bounded
// by redialTimeout, not by the caller that started it: a caller that
// gives up early must not fail the others waiting on the same dial.
func (r *Redialer) client(ctx context.Context) (*Client, error) {
	r.mu.Lock()
	if r.c != nil && r.c.Err() == nil {
		c := r.c
		r.mu.Unlock()
		return c, nil
	}
	if r.closed {
		r.mu.Unlock()
		return nil, handoff.ErrTransport.With("the connection to the worker is closed")
	}
	if r.c != nil {
		r.log.Warn("connection to a worker lost; dialling again", "addr", r.addr, "err", r.c.Err())
		r.c.Close()
		r.c = nil
	}
	da := r.cfg.DeadAfter
	if da == 0 {
		da = DefaultDeadAfter
	}
	d := r.pending
	if d == nil {
		dctx, cancel := context.WithTimeout(context.Background(), redialTimeout)
		d = &dialing{done: make(chan struct{}), cancel: cancel}
		r.pending = d
		go r.redial(dctx, d)
	} else if d.overdue {
		r.mu.Unlock()
		return nil, handoff.ErrTransport.With("the worker at %s is not answering: no connection within %v (dialling again in the background)", r.addr, da)
	}
	r.mu.Unlock()
	// A caller waits for the dial no longer than a peer may stay silent
	// (DeadAfter): a hung peer's kernel still completes the TCP connect,
	// and its handshake would otherwise hold the caller (the router's one
	// admission in progress, say) for the whole dial timeout.
	wait := ctx
	if da > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, da)
		defer cancel()
	}
	select {
	case <-d.done:
		return d.c, d.err
	case <-wait.Done():
		if ctx.Err() == nil {
			r.mu.Lock()
			d.overdue = true
			r.mu.Unlock()
			return nil, handoff.ErrTransport.With("no connection to the worker at %s within %v (dialling again in the background)", r.addr, da)
		}
		return nil, transportErr(ctx.Err())
	}
}

// redial runs the dial d and publishes its outcome.
func (r *Redialer) redial(ctx context.Context, d *dialing) {
	defer d.cancel()
	c, err := r.dial(ctx, r.addr, r.cfg)
	r.mu.Lock()
	if err == nil && r.closed {
		c.Close()
		c, err = nil, handoff.ErrTransport.With("the connection to the worker is closed")
	}
	if err == nil {
		r.log.Info("connection to a worker (re-)established", "addr", r.addr)
		r.c = c
	}
	d.c, d.err = c, err
	r.pending = nil
	r.mu.Unlock()
	close(d.done)
}

// Encrypt reports whether the current connection encrypts its frames
// (Client.Encrypt); without one, whether the next will be asked to.
func (r *Redialer) Encrypt() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return r.cfg.Encrypt
	}
	return r.c.Encrypt()
}

// Close closes the current connection, if any, and ends a dial under
// way; later calls fail (the caller is shutting down).
func (r *Redialer) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.pending != nil {
		r.pending.cancel()
	}
	if r.c == nil {
		return nil
	}
	err := r.c.Close()
	r.c = nil
	return err
}

func (r *Redialer) Reserve(ctx context.Context, m *handoff.Reserve) (*handoff.Reservation, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Reserve(ctx, m)
}

func (r *Redialer) Write(ctx context.Context, ws []handoff.PageWrite) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Write(ctx, ws)
}

func (r *Redialer) Commit(ctx context.Context, m *handoff.Commit) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return c.Commit(ctx, m)
}

func (r *Redialer) Abort(ctx context.Context, a *handoff.Abort) error {
	return r.idempotent(ctx, func(c *Client) error { return c.Abort(ctx, a) })
}

func (r *Redialer) Drained(ctx context.Context, id kv.ID) error {
	return r.idempotent(ctx, func(c *Client) error { return c.Drained(ctx, id) })
}

// idempotent runs an idempotent call, once more on a fresh connection
// when the first attempt failed because its connection died (not when the
// peer answered with an error, nor when ctx ended).
func (r *Redialer) idempotent(ctx context.Context, call func(*Client) error) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	err = call(c)
	if err == nil || !errors.Is(err, handoff.ErrTransport) || c.Err() == nil || ctx.Err() != nil {
		return err
	}
	c, rerr := r.client(ctx)
	if rerr != nil {
		return err
	}
	return call(c)
}

// Load implements handoff.Loader on the current connection.
func (r *Redialer) Load(ctx context.Context) (*handoff.Load, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Load(ctx)
}

func (r *Redialer) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Stream(ctx, id, p)
}

func (r *Redialer) Cancel(ctx context.Context, id kv.ID) error {
	return r.idempotent(ctx, func(c *Client) error { return c.Cancel(ctx, id) })
}

func (r *Redialer) Prefill(ctx context.Context, m *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	c, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Prefill(ctx, m)
}

var (
	_ handoff.Decode  = (*Redialer)(nil)
	_ handoff.Prefill = (*Redialer)(nil)
)
