package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/handoff/inproc"
	"sluice/internal/handoff/shm"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
	"sluice/internal/preflight"
	"sluice/internal/router"
)

// Transports of `sluice serve`.
const (
	TransportInproc = "inproc"
	TransportTCP    = "tcp"
	TransportSHM    = "shm"
)

// LocalConfig configures every role in one process.
type LocalConfig struct {
	Pools
	// Colocated runs one scheduler without a handoff (the reference path).
	Colocated bool
	// Transport between prefill and decode when not colocated.
	Transport string
	// Encrypt seals the in-process roles' loopback TCP frames as between
	// hosts (I15; `sluice serve --encrypt`): what encryption costs.
	Encrypt        bool
	Threads        int
	MaxConcurrency int
	// ShareThreads lets the in-process prefill and decode workers (one
	// pair, not a cluster) each borrow the other's threads while the other
	// is idle (engine.Config.BurstThreads): `sluice serve` sets it.
	ShareThreads bool
	// ChunkTokens, StepTokens and SharedStepTokens are each role's
	// prefill chunk, step token budget and shared step's prompt tokens
	// (engine.Config; 0: the engine's defaults).
	ChunkTokens, StepTokens, SharedStepTokens int
	// HandoffAfterPrefill: the prefill worker sends a prompt's pages only
	// once it is whole (engine.Config.HandoffAfterPrefill; comparisons).
	HandoffAfterPrefill bool
	// NestForward is the prefill and colocated roles' fixed cost of a
	// forward pass (engine.Config.NestForward) when above 0; else, with
	// MeasureNestForward (`sluice serve`), each role measures its own at
	// start (SetNestForward); else the engine's default.
	NestForward        int
	MeasureNestForward bool
	// MaxQueue and QueueTimeout bound the engine's waiting queue (0: defaults).
	MaxQueue     int
	QueueTimeout time.Duration
	// ShmDir holds the decode pool's shared file for the shm transport
	// (default /dev/shm when present, else the temp dir). Files of pools
	// no live process holds (left by a process killed before it removed
	// its own) are removed there first (kv.RemoveStaleShared).
	ShmDir string
	// GuardFile, when set, runs create, which creates the file at path
	// (the shm transport's decode pool), so that an exit of the process
	// that skips Close (a signal during start-up, cmd/sluice) waits for
	// create to return and then removes path. Close removes it otherwise.
	GuardFile func(path string, create func() error) error
	Logger    *slog.Logger
	// PrefixCache turns on the prefix cache of the colocated engine and the
	// prefill worker (I11; the decode worker has none).
	PrefixCache bool
	// PublicPrefix is the operator's declared public prefix
	// (--shared-prefix-file, engine.Config.PublicPrefix); nil shares nothing.
	PublicPrefix []int32
	// Engine, when set, adjusts each role's engine configuration before
	// it is built (tests use it for LIFO page reuse).
	Engine func(role string, c *engine.Config)
	// PrefillWorkers and DecodeWorkers, when either is above 1, run that
	// many workers of each role behind one router (BuildCluster, TCP only).
	PrefillWorkers, DecodeWorkers int
	// Listen, when set, opens the roles' loopback listeners in place of
	// net.Listen("tcp", "127.0.0.1:0") (tests use it to drop the roles'
	// connections under a running stack).
	Listen func() (net.Listener, error)
	// Dial, when set, opens the roles' connections to one another in
	// place of a net.Dialer (tests use it for a peer that does not answer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Stack is a running set of roles and the engine the router drives.
type Stack struct {
	Engine engine.Engine
	Report preflight.Report
	// Pools is every role's KV pool, for metrics and drain checks.
	Pools  map[string]*kv.Pool
	decode *engine.DecodeWorker
	// prefill is the in-process prefill worker (its first-token phases).
	prefill *engine.PrefillWorker
	meter   *meter
	closers []func()
	// peers are the connections between the roles, for Ready.
	peers []Peer
	// decodeSrv is the decode role's TCP service (tests stop it to see
	// readiness follow).
	decodeSrv *tcp.Server
	// cluster is set when the stack runs several workers per role.
	cluster *ClusterStack
}

// Close drains the engine, then stops the roles and their transports.
func (s *Stack) Close(ctx context.Context) error {
	var err error
	if s.Engine != nil {
		err = s.Engine.Close(ctx)
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
	return err
}

// Info is the server's own figures for remote preflight: every role's pool
// as built from the preflight report.
func (s *Stack) Info() preflight.ServerInfo {
	si := preflight.ServerInfo{Server: "sluice", Context: s.Report.EffectiveContext}
	for _, r := range s.Report.Roles {
		si.Roles = append(si.Roles, preflight.RoleInfo{Role: r.Role, PoolTokens: r.PoolTokens, PageSize: r.PageSize, Context: r.EffectiveContext})
	}
	return si
}

// Stats reads every pool and the decode worker's protocol counters.
func (s *Stack) Stats() router.EngineStats {
	st := Stats(s.Pools, s.decode)
	if s.cluster != nil {
		for _, d := range s.cluster.Decodes {
			addReceiverStats(&st, d.ReceiverStats())
		}
	}
	if s.meter != nil {
		st.HandoffBytes, st.Handoffs, st.HandoffSeconds = s.meter.snapshot()
	}
	if q, ok := s.Engine.(engine.QueueReporter); ok {
		qs := q.QueueStats()
		st.Queue = &qs
	}
	st.Sched = map[string]engine.SchedStats{}
	if c, ok := s.Engine.(interface{ SchedStats() engine.SchedStats }); ok {
		st.Sched["colocated"] = c.SchedStats()
	}
	if s.decode != nil {
		st.Sched["decode"] = s.decode.SchedStats()
	}
	if s.prefill != nil {
		st.Sched["prefill"] = s.prefill.SchedStats()
	}
	st.NestForward = map[string]int{}
	if c, ok := s.Engine.(*engine.Colocated); ok {
		st.NestForward["colocated"] = c.SchedStats().NestForward
	}
	if s.prefill != nil {
		st.NestForward["prefill"] = s.prefill.SchedStats().NestForward
	} else if s.cluster != nil && len(s.cluster.Prefills) > 0 {
		st.NestForward["prefill"] = s.cluster.Prefills[0].SchedStats().NestForward // every one's config is the same
	}
	st.Phases = map[string][]engine.PhaseStat{}
	switch e := s.Engine.(type) {
	case *engine.Colocated:
		st.Phases["colocated"] = e.FirstTokenPhases()
	case engine.FirstTokenPhases:
		st.Phases["router"] = e.FirstTokenPhases()
	}
	if s.prefill != nil {
		st.Phases["prefill"] = s.prefill.FirstTokenPhases()
		st.CommitAsides = router.PrefillAsides(s.prefill.Stats())
	}
	return st
}

// Stats builds a metrics snapshot from pools and an optional decode worker.
func Stats(pools map[string]*kv.Pool, dw *engine.DecodeWorker) router.EngineStats {
	var st router.EngineStats
	// Every kind an operator alerts on exists from the start, at 0: a
	// series born at 1 with the first violation is invisible to
	// increase() and rate() (docs/operations.md's alert).
	st.Violations = map[string]uint64{}
	if len(pools) > 0 {
		for _, k := range kv.Kinds {
			st.Violations[string(k)] = 0
		}
	}
	if dw != nil {
		for _, c := range integrityHandoffCodes {
			st.Violations["handoff_"+string(c)] = 0
		}
		st.ReservationsRefused = map[string]uint64{router.RefusedKVCapacity: 0, router.RefusedOther: 0}
	}
	for role, p := range pools {
		ps := p.Stats()
		pageSize := uint64(p.Geometry().PageSize)
		st.Pools = append(st.Pools, router.PoolStats{Role: role, PageSize: int(pageSize), Pages: map[string]int{
			"free": ps.Free, "reserved": ps.Reserved, "filling": ps.Filling, "sealed": ps.Sealed, "quarantined": ps.Quarantined,
		}, Cache: router.CacheStats{
			HitTokens: ps.CacheHits * pageSize, MissTokens: ps.CacheMisses * pageSize, Evictions: ps.CacheEvictions,
			IdlePages: ps.CacheIdle, ReadPages: ps.Cached - ps.CacheIdle, Readers: ps.CacheReaders,
			PublicPages: ps.CachePublic, Verified: ps.Verified,
		}})
		for k, n := range ps.Violations {
			st.Violations[string(k)] += n
		}
		st.LateWritesDropped += ps.LateWrites
	}
	if dw != nil {
		addReceiverStats(&st, dw.ReceiverStats())
		// A decode worker process has no queue: its scheduler's sequences
		// are its load (the gateway metrics; Stack.Stats replaces this).
		st.Sched = map[string]engine.SchedStats{"decode": dw.SchedStats()}
	}
	return st
}

// integrityHandoffCodes are the decode side's handoff verification
// failures (addReceiverStats counts them as integrity), exported at 0
// from the start.
var integrityHandoffCodes = []handoff.Code{
	handoff.ErrCountMismatch.Code, handoff.ErrCoverage.Code, handoff.ErrDigestMismatch.Code, handoff.ErrDigestMissing.Code,
	handoff.ErrBadWrite.Code, handoff.ErrSealedWrite.Code, handoff.ErrChecksum.Code, handoff.ErrState.Code,
}

// addReceiverStats sorts the decode side's failed handoffs into what the
// metrics promise: a refused reservation (no free pages, or any other
// refusal) is back-pressure and an abort is routine, so neither may move
// the integrity counter an operator pages on; every other failure code is a
// verification failure (count, coverage, digest, write, checksum, state) and
// is counted as an integrity violation (I8). A code added later counts as
// integrity until classified here: better a false page than a hidden leak.
func addReceiverStats(st *router.EngineStats, rs handoff.ReceiverStats) {
	st.LateWritesDropped += rs.LateWrites
	st.HandoffPagesTransferred += rs.PagesTransferred
	st.HandoffPagesSkipped += rs.PagesSkipped
	if st.ReservationsRefused == nil {
		st.ReservationsRefused = map[string]uint64{}
	}
	for code, n := range rs.Failed {
		switch code {
		case handoff.ErrNoRoom.Code:
			st.ReservationsRefused[router.RefusedKVCapacity] += n
		case handoff.ErrRefused.Code:
			st.ReservationsRefused[router.RefusedOther] += n
		case handoff.ErrAborted.Code:
			st.HandoffsAborted += n
		default:
			st.Violations["handoff_"+string(code)] += n
		}
	}
}

// PreflightError is a role that refused to start (I2).
type PreflightError struct{ Report preflight.Report }

func (e *PreflightError) Error() string { return e.Report.Err().Error() }

// BuildLocal runs preflight for the roles of one process and starts them:
// colocated, or prefill and decode joined by the chosen transport.
func BuildLocal(m *Model, c LocalConfig) (*Stack, error) {
	roles := []string{preflight.RolePrefill, preflight.RoleDecode}
	if c.Colocated {
		roles = []string{preflight.RoleColocated}
	} else if c.PrefillWorkers > 1 || c.DecodeWorkers > 1 {
		if c.Transport != "" && c.Transport != TransportTCP {
			return nil, fmt.Errorf("several workers per role run over the tcp transport only (got %q)", c.Transport)
		}
		cs, err := BuildCluster(m, ClusterConfig{LocalConfig: c, PrefillWorkers: max(c.PrefillWorkers, 1), DecodeWorkers: max(c.DecodeWorkers, 1), Routers: 1})
		if err != nil {
			return nil, err
		}
		return &Stack{Engine: cs.Routers[0], Report: cs.Report, Pools: cs.Pools(), cluster: cs,
			closers: []func(){func() { cs.Close(context.Background()) }}}, nil
	}
	rep := m.Preflight(c.Pools, roles...)
	if !rep.OK {
		return nil, &PreflightError{Report: rep}
	}
	cfgs := map[string]engine.Config{}
	for _, r := range roles {
		ec, err := m.RoleConfig(rep, r, c.Threads, c.MaxConcurrency)
		if err != nil {
			return nil, err
		}
		ec.MaxQueue, ec.QueueTimeout = c.MaxQueue, c.QueueTimeout
		ec.ChunkTokens, ec.StepTokens, ec.SharedStepTokens = c.ChunkTokens, c.StepTokens, c.SharedStepTokens
		ec.HandoffAfterPrefill = c.HandoffAfterPrefill
		ec.PrefixCache, ec.Verify = c.PrefixCache, c.Pools.Verify
		ec.GrammarMaskBytes = c.Pools.GrammarMaskBytes
		if r != preflight.RoleDecode {
			// The public scope is prefill's and the colocated engine's:
			// decode keeps its own cache per tenant (its lookup is the
			// handoff receiver's, tenant-scoped), which prefill's public
			// pages do not need.
			ec.PublicPrefix = c.PublicPrefix
		}
		if r != preflight.RoleDecode {
			if err := SetNestForward(c.Logger, r, &ec, c.NestForward, c.MeasureNestForward); err != nil {
				return nil, err
			}
		}
		if c.Engine != nil {
			c.Engine(r, &ec)
		}
		cfgs[r] = ec
	}
	s := &Stack{Report: rep, Pools: map[string]*kv.Pool{}}
	if c.Colocated {
		col, err := engine.NewColocated(cfgs[preflight.RoleColocated])
		if err != nil {
			return nil, err
		}
		s.Engine = col
		s.Pools[preflight.RoleColocated] = col.Pool()
		return s, nil
	}
	if err := s.buildDisagg(m, c, cfgs[preflight.RolePrefill], cfgs[preflight.RoleDecode]); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	return s, nil
}

func (s *Stack) buildDisagg(m *Model, c LocalConfig, pcfg, dcfg engine.Config) error {
	transport := c.Transport
	if transport == "" {
		transport = TransportTCP
	}
	if transport == TransportSHM {
		dir := c.ShmDir
		if dir == "" {
			dir = os.TempDir()
			if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
				dir = "/dev/shm"
			}
		}
		log := c.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		removed, err := kv.RemoveStaleShared(dir, shmFilePrefix)
		for _, p := range removed {
			log.Info("removed the shm pool file of a process that is gone", "path", p)
		}
		if err != nil {
			log.Warn("shm transport: a stale pool file stays", "err", err)
		}
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		// kv creates the file (O_EXCL, locked for the pool's life).
		dcfg.SharedFile = filepath.Join(dir, shmFilePrefix+hex.EncodeToString(id[:]))
		path := dcfg.SharedFile
		s.closers = append(s.closers, func() { os.Remove(path) })
	}
	// The two roles share this process's cores: prefill borrows decode's
	// threads while decode has nothing to compute (a lone prompt prefills
	// on every core). Not the other way: decode's steps of a few tokens
	// ran slower on two threads than on one (measured at 1 in flight, load
	// ~14: ITL p50 0.98 ms on one, 1.5-1.9 ms borrowing).
	if c.ShareThreads {
		pcfg.BurstThreads = pcfg.Threads + dcfg.Threads
	}
	var dw *engine.DecodeWorker
	newDecode := func() error {
		var err error
		dw, err = engine.NewDecodeWorker(dcfg)
		return err
	}
	var err error
	if dcfg.SharedFile != "" && c.GuardFile != nil {
		err = c.GuardFile(dcfg.SharedFile, newDecode)
	} else {
		err = newDecode()
	}
	if err != nil {
		return err
	}
	if c.ShareThreads {
		pcfg.Idle = dw.Idle
	}
	s.decode = dw
	s.Pools[preflight.RoleDecode] = dw.Pool()
	s.closers = append(s.closers, dw.Close)

	var toDecode, routerDecode handoff.Decode
	var routerPrefill handoff.Prefill
	var tc tcp.Config
	switch transport {
	case TransportInproc:
		toDecode, routerDecode = inproc.Decode(dw), inproc.Decode(dw)
	case TransportTCP, TransportSHM:
		// One process, but the roles still talk over authenticated loopback
		// TCP (I12) with a secret that never leaves this process.
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		// Every role of this process holds pages of the one --kv-type.
		tc = tcp.Config{Secret: secret, Model: m.Fingerprint(), DialContext: c.Dial, HoldsKV: true, KVType: dcfg.KVType, Encrypt: c.Encrypt}
		daddr, err := s.serveTCP(c, tc, dw, nil)
		if err != nil {
			return err
		}
		dc, err := s.connect(c, daddr, tc)
		if err != nil {
			return err
		}
		s.peers = append(s.peers, Peer{Role: "decode (from prefill)", Conn: dc})
		toDecode = dc
		rd, err := s.connect(c, daddr, tc)
		if err != nil {
			return err
		}
		s.peers = append(s.peers, Peer{Role: "decode", Conn: rd})
		routerDecode = rd
		if transport == TransportSHM {
			w, err := shm.Open(dcfg.SharedFile, kv.Geometry{Layers: m.Runtime.Layers(), KVDim: m.Runtime.KVDim(), PageSize: dcfg.PageSize, Type: dcfg.KVType}, dc)
			if err != nil {
				return err
			}
			s.closers = append(s.closers, func() { w.Close() })
			toDecode = w
		}
	default:
		return fmt.Errorf("unknown transport %q (inproc, tcp, shm)", transport)
	}

	s.meter = newMeter()
	toDecode = metered{toDecode, s.meter}
	routerDecode = metered{routerDecode, s.meter}
	pw, err := engine.NewPrefillWorker(pcfg, toDecode)
	if err != nil {
		return err
	}
	s.Pools[preflight.RolePrefill] = pw.Pool()
	s.prefill = pw
	s.closers = append(s.closers, pw.Close)
	if transport == TransportInproc {
		routerPrefill = inproc.Prefill(pw)
	} else {
		paddr, err := s.serveTCP(c, tc, nil, pw)
		if err != nil {
			return err
		}
		rp, err := s.connect(c, paddr, tc)
		if err != nil {
			return err
		}
		s.peers = append(s.peers, Peer{Role: "prefill", Conn: rp})
		routerPrefill = rp
	}
	eng, err := engine.NewDisaggregated(engine.DisaggConfig{
		Model: m.Name, Vocab: m.Runtime.Vocab(), Fingerprint: m.Fingerprint(),
		Context:        engine.EffectiveContext(pw.Context(), dw.Context()),
		MaxConcurrency: dcfg.MaxConcurrency,
		MaxQueue:       dcfg.MaxQueue,
		QueueTimeout:   dcfg.QueueTimeout,
		Unsafe:         dcfg.Unsafe, // test hook only, set through LocalConfig.Engine
	}, routerPrefill, routerDecode)
	if err != nil {
		return err
	}
	s.Engine = eng
	return nil
}

// shmFilePrefix names the shm transport's decode pool files.
const shmFilePrefix = "sluice-decode-pool-"

// connectTimeout bounds the first dial of a role's own loopback listener.
const connectTimeout = 10 * time.Second

// connect dials a role over TCP as `sluice router` does: through a
// Redialer, so a connection that dies (a peer that dropped it, a reset)
// is dialled again by the next call instead of failing every later
// request of every tenant until a restart.
func (s *Stack) connect(c LocalConfig, addr string, tc tcp.Config) (*tcp.Redialer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	r, err := tcp.ConnectRedialer(ctx, addr, tc, c.Logger)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { r.Close() })
	return r, nil
}

func (s *Stack) serveTCP(c LocalConfig, tc tcp.Config, d handoff.Decode, p handoff.Prefill) (string, error) {
	srv, err := tcp.NewServer(tc, d, p)
	if err != nil {
		return "", err
	}
	listen := c.Listen
	if listen == nil {
		listen = func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	}
	l, err := listen()
	if err != nil {
		return "", err
	}
	if d != nil {
		s.decodeSrv = srv
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	s.closers = append(s.closers, func() { srv.Close(); <-done })
	return l.Addr().String(), nil
}

// IsPreflight reports whether err is a preflight refusal.
func IsPreflight(err error) (*PreflightError, bool) {
	var pe *PreflightError
	ok := errors.As(err, &pe)
	return pe, ok
}
