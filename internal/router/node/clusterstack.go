package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
	"sluice/internal/preflight"
)

// ClusterConfig is an in-process cluster: prefill and decode workers and
// routers, every link its own authenticated loopback TCP connection (I12),
// as separate processes would have them (sluice serve --prefill-workers N
// --decode-workers M, and the cluster tests).
type ClusterConfig struct {
	LocalConfig
	PrefillWorkers, DecodeWorkers, Routers int
	Weights                                Weights
	// Probe is the health-probe interval (default 1s).
	Probe time.Duration
	// WrapDecode, when set, wraps decode worker i's service behind its TCP
	// server (tests use it to hold a worker's streams mid-decode).
	WrapDecode func(i int, d handoff.Decode) handoff.Decode
}

// ClusterStack is a running in-process cluster.
type ClusterStack struct {
	Report   preflight.Report
	Routers  []*engine.Disaggregated
	Clusters []*Cluster
	Prefills []*engine.PrefillWorker
	Decodes  []*engine.DecodeWorker
	// DecodeAddrs are the decode workers' names (their addresses).
	DecodeAddrs []string
	decodeSrv   []*tcp.Server
	closers     []func()
	// Sets are the prefill workers' decode connections; tc the links'
	// configuration and decodeCfg the decode workers' (StartDecode).
	Sets      []*DecodeSet
	tc        tcp.Config
	decodeCfg engine.Config
	// listen is LocalConfig.Listen: the workers' listeners (tests track
	// the connections they accept).
	listen func() (net.Listener, error)
}

// StartDecode starts one more decode worker that no router or prefill
// worker knows yet (discovery tests); it returns its address. adjust, when
// given, changes its configuration (a worker unlike the others).
func (s *ClusterStack) StartDecode(adjust ...func(*engine.Config)) (string, error) {
	cfg := s.decodeCfg
	for _, a := range adjust {
		a(&cfg)
	}
	dw, err := engine.NewDecodeWorker(cfg)
	if err != nil {
		return "", err
	}
	s.closers = append(s.closers, dw.Close)
	s.Decodes = append(s.Decodes, dw)
	addr, srv, err := s.serve(s.tc, dw, nil)
	if err != nil {
		return "", err
	}
	s.DecodeAddrs = append(s.DecodeAddrs, addr)
	s.decodeSrv = append(s.decodeSrv, srv)
	return addr, nil
}

// JoinDecode connects every router and prefill worker to the decode
// worker at addr (discovery found it). Each router vets it before use as
// `sluice router` does: it must admit the router's context (I2).
func (s *ClusterStack) JoinDecode(addr string) {
	for _, set := range s.Sets {
		r := tcp.NewRedialer(addr, s.tc)
		s.closers = append(s.closers, func() { r.Close() })
		set.Add(addr, r)
	}
	for i, c := range s.Clusters {
		r := tcp.NewRedialer(addr, s.tc)
		s.closers = append(s.closers, func() { r.Close() })
		ctxLen := s.Routers[i].Info().Context
		// Closed once it left and its last request ended, as in
		// `sluice router` (Cluster.Remove).
		c.Add("decode", Worker{Name: addr, Decode: r, Conn: r, Load: LoadOf(r), Close: func() { r.Close() },
			Vet: func(ctx context.Context) error { return ProbeDecodeContext(ctx, r, ctxLen, s.tc.Model) }})
	}
}

// LeaveDecode takes the decode worker at addr out of every router and
// prefill worker (discovery lost it).
func (s *ClusterStack) LeaveDecode(addr string) {
	for _, c := range s.Clusters {
		c.Remove("decode", addr)
	}
}

// KillDecode stops decode worker i's TCP service, closing every
// connection to it, as a crashed or partitioned worker would look.
func (s *ClusterStack) KillDecode(i int) { s.decodeSrv[i].Close() }

// Pools is every worker's pool by name ("decode-0", "prefill-1", ...).
func (s *ClusterStack) Pools() map[string]*kv.Pool {
	out := map[string]*kv.Pool{}
	for i, d := range s.Decodes {
		out[fmt.Sprintf("decode-%d", i)] = d.Pool()
	}
	for i, p := range s.Prefills {
		out[fmt.Sprintf("prefill-%d", i)] = p.Pool()
	}
	return out
}

// Close drains the routers, then stops every worker and connection.
func (s *ClusterStack) Close(ctx context.Context) error {
	var err error
	for _, r := range s.Routers {
		if e := r.Close(ctx); e != nil && err == nil {
			err = e
		}
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
	return err
}

func (s *ClusterStack) serve(tc tcp.Config, d handoff.Decode, p handoff.Prefill) (string, *tcp.Server, error) {
	var st Stack
	addr, err := st.serveTCP(LocalConfig{Listen: s.listen}, tc, d, p)
	s.closers = append(s.closers, st.closers...)
	return addr, st.decodeSrv, err
}

// BuildCluster starts the workers and routers of c in this process.
func BuildCluster(m *Model, c ClusterConfig) (*ClusterStack, error) {
	if c.PrefillWorkers < 1 || c.DecodeWorkers < 1 || c.Routers < 1 {
		return nil, fmt.Errorf("a cluster needs at least one prefill worker, decode worker and router")
	}
	if c.Probe <= 0 {
		c.Probe = time.Second
	}
	if c.Weights == (Weights{}) {
		c.Weights = DefaultWeights
	}
	rep := m.Preflight(c.Pools, preflight.RolePrefill, preflight.RoleDecode)
	if !rep.OK {
		return nil, &PreflightError{Report: rep}
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	cfgs := map[string]engine.Config{}
	for _, r := range []string{preflight.RolePrefill, preflight.RoleDecode} {
		ec, err := m.RoleConfig(rep, r, c.Threads, c.MaxConcurrency)
		if err != nil {
			return nil, err
		}
		ec.ChunkTokens, ec.StepTokens, ec.SharedStepTokens = c.ChunkTokens, c.StepTokens, c.SharedStepTokens
		// Every worker's prefix-cache salts are keyed with the cluster's
		// shared secret, as separate processes key them with the key file.
		ec.PrefixCache, ec.CacheSecret = c.PrefixCache, secret
		ec.Verify, ec.GrammarMaskBytes = c.Pools.Verify, c.Pools.GrammarMaskBytes
		if r == preflight.RolePrefill {
			ec.PublicPrefix = c.PublicPrefix // prefill's public scope; decode stays per tenant
			if err := SetNestForward(c.Logger, r, &ec, c.NestForward, c.MeasureNestForward); err != nil {
				return nil, err
			}
		}
		if c.Engine != nil {
			c.Engine(r, &ec)
		}
		cfgs[r] = ec
	}
	tc := tcp.Config{Secret: secret, Model: m.Fingerprint(), HoldsKV: true, KVType: cfgs[preflight.RoleDecode].KVType}
	s := &ClusterStack{Report: rep, tc: tc, decodeCfg: cfgs[preflight.RoleDecode], listen: c.Listen}
	fail := func(err error) (*ClusterStack, error) {
		s.Close(context.Background())
		return nil, err
	}
	for i := 0; i < c.DecodeWorkers; i++ {
		dw, err := engine.NewDecodeWorker(cfgs[preflight.RoleDecode])
		if err != nil {
			return fail(err)
		}
		s.closers = append(s.closers, dw.Close)
		s.Decodes = append(s.Decodes, dw)
		var svc handoff.Decode = dw
		if c.WrapDecode != nil {
			svc = c.WrapDecode(i, dw)
		}
		addr, srv, err := s.serve(tc, svc, nil)
		if err != nil {
			return fail(err)
		}
		s.DecodeAddrs = append(s.DecodeAddrs, addr)
		s.decodeSrv = append(s.decodeSrv, srv)
	}
	dial := func(addr string) (*tcp.Redialer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := tcp.ConnectRedialer(ctx, addr, tc, c.Logger)
		if err == nil {
			s.closers = append(s.closers, func() { r.Close() })
		}
		return r, err
	}
	var prefillAddrs []string
	for i := 0; i < c.PrefillWorkers; i++ {
		set := map[string]handoff.Decode{}
		for _, a := range s.DecodeAddrs {
			r, err := dial(a)
			if err != nil {
				return fail(err)
			}
			set[a] = r
		}
		ds := NewDecodeSet(set)
		s.Sets = append(s.Sets, ds)
		pw, err := engine.NewPrefillWorker(cfgs[preflight.RolePrefill], ds)
		if err != nil {
			return fail(err)
		}
		s.closers = append(s.closers, pw.Close)
		s.Prefills = append(s.Prefills, pw)
		addr, _, err := s.serve(tc, nil, Routed{Inner: pw, Set: ds})
		if err != nil {
			return fail(err)
		}
		prefillAddrs = append(prefillAddrs, addr)
	}
	ctxLen := engine.EffectiveContext(s.Prefills[0].Context(), s.Decodes[0].Context())
	for i := 0; i < c.Routers; i++ {
		var ps, ds []Worker
		for _, a := range prefillAddrs {
			r, err := dial(a)
			if err != nil {
				return fail(err)
			}
			ps = append(ps, Worker{Name: a, Prefill: r, Conn: r, Load: LoadOf(r)})
		}
		for _, a := range s.DecodeAddrs {
			r, err := dial(a)
			if err != nil {
				return fail(err)
			}
			ds = append(ds, Worker{Name: a, Decode: r, Conn: r, Load: LoadOf(r), Close: func() { r.Close() }})
		}
		cl, err := NewCluster(ps, ds, c.Weights, c.Logger)
		if err != nil {
			return fail(err)
		}
		cl.PageSize = cfgs[preflight.RoleDecode].PageSize
		cl.Start(c.Probe)
		s.closers = append(s.closers, cl.Close)
		eng, err := engine.NewDisaggregatedPairs(engine.DisaggConfig{Model: m.Name, Vocab: m.Runtime.Vocab(), Fingerprint: m.Fingerprint(),
			Context: ctxLen, MaxConcurrency: c.MaxConcurrency}, cl)
		if err != nil {
			return fail(err)
		}
		s.Routers = append(s.Routers, eng)
		s.Clusters = append(s.Clusters, cl)
	}
	return s, nil
}

// LoadOf is a worker connection's load report, when its transport has one.
func LoadOf(c any) func(ctx context.Context) (*handoff.Load, error) {
	l, ok := c.(handoff.Loader)
	if !ok {
		return nil
	}
	return l.Load
}
