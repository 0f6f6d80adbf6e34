package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/cluster"
	"sluice/internal/engine"
	"sluice/internal/handoff"
)

// Worker is one prefill or decode worker a router can pick.
type Worker struct {
	// Name is how the worker is named in logs, metrics and, for decode
	// workers, in PrefillRequest.Decode: the prefill workers must be
	// configured with the same names (its --decode list).
	Name    string
	Prefill handoff.Prefill // prefill workers
	Decode  handoff.Decode  // decode workers
	// Conn is probed for health (tcp.Redialer: a failed probe marks the
	// worker down, a later good one up again).
	Conn Checker
	// Load, when set, is the worker's load report (polled with the probe):
	// a decode worker's free, total and cached KV pages, and every
	// worker's requests from all routers (the queue scorers).
	Load func(ctx context.Context) (*handoff.Load, error)
	// Close, when set, releases the connection once a removed worker has
	// no request left.
	Close func()
	// Vet, when set, runs once the worker first answers and before it
	// gets any request (the router's start-up checks, for a worker that
	// joins later or was unreachable at start: a decode worker must admit
	// the router's context, I2). A transport error leaves the worker
	// unvetted until a later probe; any other error refuses it for good,
	// logged and counted by /ready, as a model mismatch is (I13).
	Vet func(ctx context.Context) error
}

// Weights are the scorers' weights (0 turns a scorer off).
type Weights struct {
	// DecodeFreePages weighs least KV pressure on decode.
	DecodeFreePages float64
	// DecodeQueue and PrefillQueue weigh the fewest requests this router
	// has in flight on the worker.
	DecodeQueue, PrefillQueue float64
	// PrefixAffinity weighs, in both pools, the worker the router last
	// sent the same tenant's same prompt prefix to (cluster.Affinity):
	// its prefix cache likely holds those pages, so decode skips their
	// transfer (decode_prefix_len) and prefill their compute.
	PrefixAffinity float64
}

// LogValue logs the weights under their flags' names (--score-...),
// "decode_free_pages=2", not a Go struct dump.
func (w Weights) LogValue() slog.Value {
	return slog.GroupValue(slog.Float64("decode_free_pages", w.DecodeFreePages), slog.Float64("decode_queue", w.DecodeQueue),
		slog.Float64("prefill_queue", w.PrefillQueue), slog.Float64("prefix_affinity", w.PrefixAffinity))
}

// AffinityPages bounds the router's memory of where it sent each prompt
// page, per pool (LRU): about 150 bytes a page, so 64k pages (1M tokens
// of distinct prefixes at 16 tokens a page) cost about 10 MB.
const AffinityPages = 1 << 16

// DefaultWeights prefer free pages on decode, and break ties by queue.
var DefaultWeights = Weights{DecodeFreePages: 2, DecodeQueue: 1, PrefillQueue: 1, PrefixAffinity: 2}

type member struct {
	w        Worker
	role     string
	up       bool
	modelOK  bool
	inFlight int
	free     int
	total    int
	cached   int
	// running is the worker's requests from every router at its last
	// load report, when ownAt of them were this router's.
	running, ownAt int
	reported       bool
	picks          uint64
	downs          uint64
	removed        bool
	// draining: the worker refused a reservation or its load report with
	// handoff.ErrDraining (it got SIGTERM); not picked until a report
	// comes back without it (a worker restarted at the same address).
	draining bool
	// vetted: Vet passed (or there is none); refused: Vet failed.
	vetted  bool
	refused error
}

func (m *member) release() {
	if m.removed && m.inFlight == 0 && m.w.Close != nil {
		go m.w.Close()
		m.w.Close = nil
	}
}

// Cluster pairs requests over many prefill and decode workers
// (engine.Pairer): internal/cluster decides from a snapshot; this type
// holds the snapshot, counts in-flight requests, marks workers down when
// a call fails with a transport error and probes them back up.
type Cluster struct {
	mu      sync.Mutex
	prefill []*member
	decode  []*member
	pProf   cluster.Profile
	dProf   cluster.Profile
	// pAff and dAff remember where prompt pages were sent (nil: affinity
	// off); affHits/affPages count picks of a worker believed to hold part
	// of the prompt, and the pages believed held, by role.
	pAff, dAff *cluster.Affinity
	affHits    map[string]uint64
	affPicks   map[string]uint64
	affPages   map[string]uint64
	rot        int
	retries    uint64
	noPair     uint64
	log        *slog.Logger
	stop       context.CancelFunc
	done       chan struct{}
	interval   time.Duration
	// PageSize is the decode pools' page size, for the estimate of pages a
	// request takes between load reports (default 16).
	PageSize int
}

var _ engine.Pairer = (*Cluster)(nil)

// NewCluster builds a pairer over the workers. Every worker starts up;
// Start runs the probe loop.
func NewCluster(prefill, decode []Worker, w Weights, log *slog.Logger) (*Cluster, error) {
	if len(prefill) == 0 || len(decode) == 0 {
		return nil, errors.New("a cluster needs at least one prefill and one decode worker")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{log: log, PageSize: 16,
		pProf: cluster.Profile{Filters: cluster.DefaultFilters(), Scorers: []cluster.Weighted{{Scorer: cluster.ShortestQueue{}, Weight: w.PrefillQueue}}},
		dProf: cluster.Profile{Filters: cluster.DefaultFilters(), Scorers: []cluster.Weighted{
			{Scorer: cluster.FreePages{}, Weight: w.DecodeFreePages}, {Scorer: cluster.ShortestQueue{}, Weight: w.DecodeQueue}}},
		affHits: map[string]uint64{}, affPicks: map[string]uint64{}, affPages: map[string]uint64{},
	}
	if w.PrefixAffinity < 0 {
		return nil, fmt.Errorf("the prefix-affinity weight %v is negative", w.PrefixAffinity)
	}
	if w.PrefixAffinity > 0 {
		aff := cluster.Weighted{Scorer: cluster.PrefixAffinity{}, Weight: w.PrefixAffinity}
		c.pProf.Scorers = append(c.pProf.Scorers, aff)
		c.dProf.Scorers = append(c.dProf.Scorers, aff)
		c.pAff, c.dAff = cluster.NewAffinity(AffinityPages), cluster.NewAffinity(AffinityPages)
	}
	seen := map[string]bool{}
	for _, p := range prefill {
		if p.Prefill == nil {
			return nil, fmt.Errorf("prefill worker %q has no prefill service", p.Name)
		}
		c.prefill = append(c.prefill, newMember("prefill", p))
	}
	for _, d := range decode {
		if d.Decode == nil {
			return nil, fmt.Errorf("decode worker %q has no decode service", d.Name)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("decode worker %q named twice", d.Name)
		}
		seen[d.Name] = true
		c.decode = append(c.decode, newMember("decode", d))
	}
	return c, nil
}

// queue estimates the worker's requests from every router: its last
// report plus this router's change since (other routers' changes show at
// the next report).
func (m *member) queue() int {
	if !m.reported {
		return m.inFlight
	}
	return max(m.inFlight, m.running+m.inFlight-m.ownAt)
}

func newMember(role string, w Worker) *member {
	return &member{w: w, role: role, up: true, modelOK: true, vetted: w.Vet == nil}
}

// Start probes every worker each interval until Close: a failed probe
// marks it down (within one interval of it stopping answering), a good
// one up; a model mismatch (I13) marks it refused for good.
func (c *Cluster) Start(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done, c.interval = cancel, make(chan struct{}), interval
	go func() {
		defer close(c.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			c.Probe(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops the probe loop.
func (c *Cluster) Close() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// Probe checks every worker once.
func (c *Cluster) Probe(ctx context.Context) {
	c.mu.Lock()
	all := append(append([]*member(nil), c.prefill...), c.decode...)
	c.mu.Unlock()
	for _, m := range all {
		c.probeOne(ctx, m)
	}
}

func (c *Cluster) probeOne(ctx context.Context, m *member) {
	var err error
	if m.w.Conn != nil {
		err = m.w.Conn.Check(ctx)
	}
	c.mu.Lock()
	vet := !m.vetted && m.refused == nil
	c.mu.Unlock()
	var verr error
	if err == nil && vet {
		verr = m.w.Vet(ctx)
		if errors.Is(verr, handoff.ErrTransport) || errors.Is(verr, handoff.ErrDraining) {
			err = verr // not answering after all, or leaving: vetted later
		}
	}
	var load *handoff.Load
	var lerr error
	if err == nil && m.w.Load != nil {
		load, lerr = m.w.Load(ctx)
	}
	c.mu.Lock()
	switch {
	case errors.Is(err, handoff.ErrModelMismatch):
		if m.modelOK {
			c.log.Error("refusing a worker of another model (I13)", "role", m.role, "worker", m.w.Name, "err", err)
		}
		m.modelOK = false
	case errors.Is(err, handoff.ErrDraining):
		c.markDraining(m)
	case err != nil:
		c.markDown(m, err)
	default:
		if vet && errors.Is(verr, handoff.ErrModelMismatch) {
			// Its pool is another model's (the decode side checks the
			// Reserve's fingerprint): refused as a handshake mismatch is.
			c.log.Error("refusing a worker of another model (I13)", "role", m.role, "worker", m.w.Name, "err", verr)
			m.modelOK = false
			m.refused = verr
		} else if vet && verr != nil {
			c.log.Error("refusing a worker that fails the router's checks", "role", m.role, "worker", m.w.Name, "err", verr)
			m.refused = verr
		} else if vet {
			m.vetted = true
		}
		if !m.up {
			c.log.Info("worker answers again", "role", m.role, "worker", m.w.Name)
		}
		m.up = true
		if load != nil && lerr == nil {
			m.free, m.total, m.cached = load.FreePages, load.TotalPages, load.CachedPages
			m.running, m.ownAt, m.reported = load.Running, m.inFlight, true
		}
		if errors.Is(lerr, handoff.ErrDraining) {
			c.markDraining(m)
		} else if m.draining && lerr == nil {
			c.log.Info("worker takes requests again", "role", m.role, "worker", m.w.Name)
			m.draining = false
		}
	}
	c.mu.Unlock()
}

func (c *Cluster) markDown(m *member, err error) {
	if m.up {
		m.downs++
		c.log.Warn("worker marked down", "role", m.role, "worker", m.w.Name, "err", err)
		// It may come back restarted, its cache empty.
		c.forget(m)
	}
	m.up = false
}

// markDraining stops picking m: it refused with handoff.ErrDraining.
func (c *Cluster) markDraining(m *member) {
	if !m.draining {
		c.log.Info("worker draining: no new requests sent to it", "role", m.role, "worker", m.w.Name)
		// It leaves, or comes back restarted with its cache empty.
		c.forget(m)
	}
	m.draining = true
}

// forget drops what the affinity memory believes m holds.
func (c *Cluster) forget(m *member) {
	if aff := c.affinity(m.role); aff != nil {
		aff.Forget(m.w.Name)
	}
}

func (c *Cluster) affinity(role string) *cluster.Affinity {
	if role == "prefill" {
		return c.pAff
	}
	return c.dAff
}

func states(ms []*member) []cluster.State {
	out := make([]cluster.State, len(ms))
	for i, m := range ms {
		// Not yet vetted counts as not answering yet; refused by the
		// vetting as unusable for good, like another model.
		out[i] = cluster.State{Name: m.w.Name, Up: m.up && m.vetted && !m.draining, ModelOK: m.modelOK && m.refused == nil, InFlight: m.inFlight, Queue: m.queue(), FreePages: m.free, TotalPages: m.total}
	}
	return out
}

// pick chooses in one pool, excluding the avoided workers when another is
// usable; with affinity on, by the request's prompt (its tenant's memory
// only) and recording the choice. strict: never an avoided worker (the
// decode pool: the pick is refused instead, and neither the affinity
// memory nor its metrics count a worker the request will not go to).
func (c *Cluster) pick(ms []*member, prof cluster.Profile, avoid map[string]bool, strict bool, aff *cluster.Affinity, pr cluster.Prompt) (*member, cluster.Choice, error) {
	st := states(ms)
	if len(avoid) > 0 {
		var rest []cluster.State
		var idx []int
		for i, s := range st {
			if !avoid[s.Name] {
				rest = append(rest, s)
				idx = append(idx, i)
			}
		}
		ch, rej, err := prof.PickPrompt(rest, c.rot, aff, pr)
		if err == nil {
			ch.Index = idx[ch.Index]
			return ms[ch.Index], ch, nil
		}
		if strict {
			return nil, ch, fmt.Errorf("no other usable worker than the %d that failed the request (%v)", len(st)-len(rest), rej)
		}
	}
	ch, rej, err := prof.PickPrompt(st, c.rot, aff, pr)
	if err != nil {
		return nil, ch, fmt.Errorf("%w (%v)", err, rej)
	}
	return ms[ch.Index], ch, nil
}

// picked records that r goes to m: in the affinity memory (m is now
// believed to hold the prompt's pages) and its metrics. Only for a
// complete pair: a decode pick whose prefill pick then failed sent
// nothing to the decode worker.
func (c *Cluster) picked(m *member, ch cluster.Choice, aff *cluster.Affinity, pr cluster.Prompt) {
	if aff != nil && len(pr.Keys) > 0 {
		aff.Record(pr.Tenant, pr.Scope, pr.Keys, m.w.Name)
		c.affPicks[m.role]++
		if ch.PrefixPages > 0 {
			c.affHits[m.role]++
			c.affPages[m.role] += uint64(ch.PrefixPages)
		}
	}
}

// Pair implements engine.Pairer. A retry or migration (avoid set) moves
// off every decode worker that failed the request, and off their prefill
// workers when another exists; with no other decode worker it refuses, so
// the last failure stands.
func (c *Cluster) Pair(r *engine.Request, avoid []*engine.Pair) (*engine.Pair, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rot++
	var avoidP, avoidD map[string]bool
	if len(avoid) > 0 {
		avoidP, avoidD = map[string]bool{}, map[string]bool{}
		for _, a := range avoid {
			avoidD[a.DecodeName] = true
			for _, m := range c.prefill {
				if m.w.Prefill == a.Prefill {
					avoidP[m.w.Name] = true
				}
			}
		}
	}
	var pr cluster.Prompt
	if c.dAff != nil {
		// The router's own chain keys of the full prompt pages; the
		// memory is keyed by the authenticated tenant and the scope.
		pr = cluster.Prompt{Tenant: r.Tenant, Scope: r.CacheScope, Keys: cluster.PageKeys(max(c.PageSize, 1), r.Prompt)}
	}
	d, dch, err := c.pick(c.decode, c.dProf, avoidD, true, c.dAff, pr)
	if err != nil {
		c.noPair++
		return nil, fmt.Errorf("decode: %w", err)
	}
	if avoidD[d.w.Name] {
		// Defence in depth: the strict pick never returns one.
		c.noPair++
		return nil, errors.New("no other usable decode worker to retry on")
	}
	p, pch, err := c.pick(c.prefill, c.pProf, avoidP, false, c.pAff, pr)
	if err != nil {
		c.noPair++
		return nil, fmt.Errorf("prefill: %w", err)
	}
	if len(avoid) > 0 {
		c.retries++
	}
	c.picked(d, dch, c.dAff, pr)
	c.picked(p, pch, c.pAff, pr)
	c.log.Debug("pair", "decode", d.w.Name, "decode_score", dch.Total, "decode_scores", dch.Scores, "decode_parts", dch.Parts,
		"decode_prefix_pages", dch.PrefixPages, "prefill", p.w.Name, "prefill_score", pch.Total, "prefill_scores", pch.Scores,
		"prefill_prefix_pages", pch.PrefixPages, "prompt_pages", len(pr.Keys), "retry", len(avoid))
	return c.attempt(r, d, p), nil
}

// Again gives r one more attempt on the workers of the pair that just
// failed it by a connection-level failure, when no other pair is left
// (engine.SamePairer). A worker marked down by that very failure is
// taken all the same: its connection is dialled afresh for the attempt
// (tcp.Redialer), and a worker that is really gone fails it at once. Not
// one that left the pool, drains, or failed the router's checks.
func (c *Cluster) Again(r *engine.Request, failed *engine.Pair) (*engine.Pair, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d, p *member
	for _, m := range c.decode {
		if m.w.Name == failed.DecodeName {
			d = m
		}
	}
	for _, m := range c.prefill {
		if m.w.Prefill == failed.Prefill {
			p = m
		}
	}
	for _, m := range []*member{d, p} {
		if m == nil || m.removed || m.draining || !m.modelOK || m.refused != nil {
			return nil, errors.New("the failed pair's workers cannot take the request again")
		}
	}
	c.log.Debug("pair again", "decode", d.w.Name, "prefill", p.w.Name)
	return c.attempt(r, d, p), nil
}

// attempt is one attempt of r on d and p, counted in flight until its
// Done.
func (c *Cluster) attempt(r *engine.Request, d, p *member) *engine.Pair {
	d.inFlight++
	p.inFlight++
	d.picks++
	p.picks++
	if d.free > 0 {
		// Until the next load report, count the pages this request will
		// take, so a burst does not all land on one worker.
		ps := max(c.PageSize, 1)
		need := (len(r.Prompt) + max(r.MaxTokens, 0) + ps - 1) / ps
		d.free = max(d.free-need, 0)
	}
	once := sync.Once{}
	return &engine.Pair{Prefill: p.w.Prefill, Decode: d.w.Decode, DecodeName: d.w.Name,
		Done: func(perr, derr error) {
			once.Do(func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				d.inFlight--
				p.inFlight--
				d.release()
				p.release()
				if errors.Is(derr, handoff.ErrTransport) {
					c.markDown(d, derr)
				}
				if errors.Is(derr, handoff.ErrDraining) {
					c.markDraining(d)
				}
				if errors.Is(perr, handoff.ErrDraining) {
					c.markDraining(p)
				}
				// A prefill error may be the prefill worker's own push to a
				// dead decode worker, carried back with a transport code:
				// prefill workers are marked down by the probe only.
			})
		}}
}

// Add joins a worker to a role's pool ("prefill" or "decode"), up until a
// probe says otherwise; a name already there is left as it is.
func (c *Cluster) Add(role string, w Worker) {
	// Probed before it joins, so its first load report is in its score.
	nm := newMember(role, w)
	c.probeOne(context.Background(), nm)
	c.mu.Lock()
	defer c.mu.Unlock()
	pool := &c.prefill
	if role == "decode" {
		pool = &c.decode
	}
	for _, m := range *pool {
		if m.w.Name == w.Name {
			return
		}
	}
	*pool = append(*pool, nm)
	c.log.Info("worker joined", "role", role, "worker", w.Name)
}

// Remove takes a worker out of its pool: it gets no new request, those it
// has finish, then its connection is closed.
func (c *Cluster) Remove(role, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pool := &c.prefill
	if role == "decode" {
		pool = &c.decode
	}
	for i, m := range *pool {
		if m.w.Name == name {
			*pool = append((*pool)[:i:i], (*pool)[i+1:]...)
			m.removed = true
			m.release()
			c.forget(m)
			c.log.Info("worker left", "role", role, "worker", name)
			return
		}
	}
}

// WorkerStats is one worker's figures.
type WorkerStats struct {
	Role, Name  string
	Up, ModelOK bool
	// Refused is why the router's checks (Worker.Vet) refused the worker;
	// Vetted is false until they ran.
	Refused error
	Vetted  bool
	// Draining: the worker refused with handoff.ErrDraining (SIGTERM).
	Draining     bool
	InFlight     int
	Picks, Downs uint64
	Free, Total  int
	// Cached is the worker's prefix-cache pages (decode load report).
	Cached int
}

// Stats is a snapshot of every worker, the retries and refusals.
func (c *Cluster) Stats() (ws []WorkerStats, retries, noPair uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range append(append([]*member(nil), c.prefill...), c.decode...) {
		ws = append(ws, WorkerStats{Role: m.role, Name: m.w.Name, Up: m.up, ModelOK: m.modelOK, Refused: m.refused, Vetted: m.vetted, Draining: m.draining, InFlight: m.inFlight,
			Picks: m.picks, Downs: m.downs, Free: m.free, Total: m.total, Cached: m.cached})
	}
	return ws, c.retries, c.noPair
}

// Ready is nil while each pool has a usable worker; otherwise it names
// the pool and why (/ready is unauthenticated: no addresses).
func (c *Cluster) Ready(context.Context) error {
	ws, _, _ := c.Stats()
	for _, role := range []string{"prefill", "decode"} {
		usable, foreign, refused := 0, 0, 0
		for _, w := range ws {
			if w.Role != role {
				continue
			}
			switch {
			case !w.ModelOK:
				foreign++
			case w.Refused != nil:
				refused++
			case w.Up && w.Vetted && !w.Draining:
				usable++
			}
		}
		if usable == 0 {
			var why []string
			if foreign > 0 {
				why = append(why, fmt.Sprintf("%d run another model, %s", foreign, handoff.ErrModelMismatch.Code))
			}
			if refused > 0 {
				why = append(why, fmt.Sprintf("%d refused by the router's checks, e.g. the context", refused))
			}
			if len(why) > 0 {
				return fmt.Errorf("no %s worker is usable (%s)", role, strings.Join(why, "; "))
			}
			return fmt.Errorf("no %s worker is reachable", role)
		}
	}
	return nil
}

var (
	descPicks   = prometheus.NewDesc("sluice_cluster_picks_total", "Requests (attempts) sent to each worker by this router.", []string{"role", "worker"}, nil)
	descUp      = prometheus.NewDesc("sluice_cluster_worker_up", "1 while the worker answers, runs the router's model, passed the router's checks (context) and is not draining (SIGTERM), else 0.", []string{"role", "worker"}, nil)
	descDowns   = prometheus.NewDesc("sluice_cluster_worker_down_total", "Times the worker was marked down.", []string{"role", "worker"}, nil)
	descFlight  = prometheus.NewDesc("sluice_cluster_in_flight", "Requests this router has on the worker now.", []string{"role", "worker"}, nil)
	descRetries = prometheus.NewDesc("sluice_cluster_retries_total", "Requests retried on another pair after failing before their first token.", nil, nil)
	descCached  = prometheus.NewDesc("sluice_cluster_worker_cached_pages", "The decode worker's prefix-cache pages (idle or read) at its last load report (how much of its pool holds prefixes; counted as free for the free-pages scorer, since reservations evict idle ones).", []string{"role", "worker"}, nil)
	descAffPick = prometheus.NewDesc("sluice_cluster_prefix_affinity_picks_total", "Picks made with prefix affinity on, by role and result (hit: the picked worker was believed, from where this router sent the same tenant's prompt pages before, to hold some of them; miss: no belief).", []string{"role", "result"}, nil)
	descAffPage = prometheus.NewDesc("sluice_cluster_prefix_affinity_pages_total", "Prompt pages the picked worker was believed to hold (prefix affinity), by role.", []string{"role"}, nil)
	descNoPair  = prometheus.NewDesc("sluice_cluster_no_pair_total", "Pairings refused because no usable worker was left.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPicks, descUp, descDowns, descFlight, descRetries, descNoPair, descAffPick, descAffPage, descCached} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	ws, retries, noPair := c.Stats()
	for _, w := range ws {
		up := 0.0
		if w.Up && w.ModelOK && w.Vetted && w.Refused == nil && !w.Draining {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descPicks, prometheus.CounterValue, float64(w.Picks), w.Role, w.Name)
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, w.Role, w.Name)
		ch <- prometheus.MustNewConstMetric(descDowns, prometheus.CounterValue, float64(w.Downs), w.Role, w.Name)
		ch <- prometheus.MustNewConstMetric(descFlight, prometheus.GaugeValue, float64(w.InFlight), w.Role, w.Name)
		if w.Role == "decode" {
			ch <- prometheus.MustNewConstMetric(descCached, prometheus.GaugeValue, float64(w.Cached), w.Role, w.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descRetries, prometheus.CounterValue, float64(retries))
	ch <- prometheus.MustNewConstMetric(descNoPair, prometheus.CounterValue, float64(noPair))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dAff == nil {
		return
	}
	for _, role := range []string{"prefill", "decode"} {
		ch <- prometheus.MustNewConstMetric(descAffPick, prometheus.CounterValue, float64(c.affHits[role]), role, "hit")
		ch <- prometheus.MustNewConstMetric(descAffPick, prometheus.CounterValue, float64(c.affPicks[role]-c.affHits[role]), role, "miss")
		ch <- prometheus.MustNewConstMetric(descAffPage, prometheus.CounterValue, float64(c.affPages[role]), role)
	}
}
