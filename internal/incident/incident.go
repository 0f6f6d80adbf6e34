// Package incident is the incident replay (`sluice demo incident`): the real decode worker (protocol core, pool,
// scheduler, model) against misbehaving prefill peers, once with every
// safeguard on, once with each safeguard alone, once with none. A "leak" is
// not inferred: every tenant's KV is filled with its own canary value, and
// an observer around the decode pool watches what attention actually reads.
// A canary of tenant T read by a sequence of another tenant is a leak.
//
// It is demo and test code, kept out of the engine: it drives the decode
// worker only through the engine's exported API (the Unsafe switches and a
// watched pool), as a misbehaving peer on the wire would.
package incident

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/quant"
	"sluice/internal/synth"
)

// Outcome of one incident run.
type Outcome string

const (
	// OutcomeError: the misbehaviour was refused or the affected request
	// failed closed, and nothing crossed tenants.
	OutcomeError Outcome = "error"
	// OutcomeLeak: another tenant's KV reached a sequence's attention.
	OutcomeLeak Outcome = "LEAK"
	// OutcomeClean: the request "succeeded" with nothing foreign read (e.g.
	// scrubbed zeros instead of stale data): wrong output, but no leak.
	OutcomeClean Outcome = "no-leak"
)

// Safeguard settings of the matrix columns.
const (
	SettingAll       = "all"
	SettingAdmission = "admission"
	SettingCount     = "count"
	SettingDigest    = "digest"
	SettingOwner     = "owner-tags"
	SettingScrub     = "scrub"
	SettingNone      = "none"
)

// Settings are the columns: all on, each safeguard alone, none.
var Settings = []string{SettingAll, SettingAdmission, SettingCount, SettingDigest, SettingOwner, SettingScrub, SettingNone}

// unsafeFor switches off every safeguard except the named one ("all":
// none off; "none": all off).
func unsafeFor(setting string) engine.Unsafe {
	off := engine.Unsafe{NoAdmission: true, NoCountCheck: true, NoDigest: true, NoOwnerCheck: true, NoExtentCheck: true, NoScrub: true}
	switch setting {
	case SettingAll:
		return engine.Unsafe{}
	case SettingAdmission:
		off.NoAdmission = false
	case SettingCount:
		off.NoCountCheck = false
	case SettingDigest:
		off.NoDigest = false
	case SettingOwner:
		// The pool's page tags: owner and generation (I3) and the written
		// extent (I4), plus the protocol's reservation match.
		off.NoOwnerCheck, off.NoExtentCheck = false, false
	case SettingScrub:
		off.NoScrub = false
	}
	return off
}

// Case is one row of the matrix.
type Case struct {
	Key, Name string
	run       func(r *rig) error
}

// Cases are the rows: the incident and its relatives.
var Cases = []Case{
	{"a", "rejected over-long request still sends one page + complete", caseRejectedBootstrap},
	{"b", "short transfer, commit claims the full count", caseShortTransfer},
	{"c", "wrong digest (pages announced, bytes never placed)", caseWrongDigest},
	{"d", "no digest", caseNoDigest},
	{"e", "stale writer after abort and LIFO page reuse", caseStaleWriter},
	{"f", "writes into another handoff's pages", caseForeignPages},
}

// Cell is one run.
type Cell struct {
	Case, Setting string
	Outcome       Outcome
	// Detail is the first error, or what leaked.
	Detail string
}

// LoadModel opens the model the decode workers run: the GGUF file at path,
// or the built-in synthetic model when path is "". name says which.
func LoadModel(path string) (rt engine.Runtime, name string, err error) {
	var f *gguf.File
	if path == "" {
		name = "built-in synthetic model"
		b, err := synth.Default()
		if err != nil {
			return nil, "", err
		}
		f, err = gguf.Parse(b)
	} else {
		name = path
		f, err = gguf.Open(path)
	}
	if err != nil {
		return nil, "", err
	}
	rt, _, err = engine.LoadRuntime(name, f)
	return rt, name, err
}

// Run runs every case under every setting against fresh decode
// workers running rt.
func Run(rt engine.Runtime) ([]Cell, error) {
	var cells []Cell
	for _, c := range Cases {
		for _, s := range Settings {
			cell, err := RunCase(rt, c, s)
			if err != nil {
				return nil, fmt.Errorf("case %s, setting %s: %w", c.Key, s, err)
			}
			cells = append(cells, cell)
		}
	}
	return cells, nil
}

// RunCase runs one case under one setting.
func RunCase(rt engine.Runtime, c Case, setting string) (Cell, error) {
	r, err := newRig(rt, unsafeFor(setting))
	if err != nil {
		return Cell{}, err
	}
	defer r.close()
	runErr := c.run(r)
	cell := Cell{Case: c.Key, Setting: setting}
	switch leak := r.spy.leak(); {
	case leak != "":
		cell.Outcome, cell.Detail = OutcomeLeak, leak
	case runErr != nil:
		cell.Outcome, cell.Detail = OutcomeError, runErr.Error()
	default:
		cell.Outcome = OutcomeClean
	}
	return cell, nil
}

// Format renders the matrix as text.
func Format(cells []Cell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s %-62s", "case", "")
	for _, s := range Settings {
		fmt.Fprintf(&b, " %-10s", s)
	}
	b.WriteString("\n")
	at := map[[2]string]Cell{}
	for _, c := range cells {
		at[[2]string{c.Case, c.Setting}] = c
	}
	for _, c := range Cases {
		fmt.Fprintf(&b, "(%s)  %-62s", c.Key, c.Name)
		for _, s := range Settings {
			fmt.Fprintf(&b, " %-10s", at[[2]string{c.Key, s}].Outcome)
		}
		b.WriteString("\n")
	}
	b.WriteString("\ncolumns: all safeguards on; each safeguard ALONE (every other one off); none.\n")
	b.WriteString("error = refused / failed closed; LEAK = another tenant's KV reached attention; no-leak = 200 with nothing foreign read.\n")
	return b.String()
}

// Canary values: each tenant's KV is filled with its own; model K/V never
// come near them.
// Canaries are exact in F16 as in F32 pages (multiples of 8 below 8192),
// so a page image of either type carries exactly the value the spy looks for.
var canaries = map[string]float32{"victim": 4240, "attacker": 5352, "writer": 6464}

// rig is one decode worker under test plus a peer's scratch pool
// (for page images and digests computed exactly as a prefill worker would).
type rig struct {
	rt   engine.Runtime
	dw   *engine.DecodeWorker
	spy  *spyPool
	peer *kv.Pool
	geo  kv.Geometry
	ctx  int
}

const pageSize = 16

func newRig(rt engine.Runtime, u engine.Unsafe) (*rig, error) {
	spy := &spyPool{}
	cfg := engine.Config{Model: rt, Context: 96, PoolPages: 24, PageSize: pageSize, Order: kv.LIFO, Unsafe: u}
	dw, err := engine.NewWatchedDecodeWorker(cfg, func(p engine.PagePool) engine.PagePool { spy.PagePool = p; return spy })
	if err != nil {
		return nil, err
	}
	geo := dw.Pool().Geometry() // the decode pool's own shape and KV type
	peer, err := kv.New(kv.Config{Geometry: geo, Pages: 16})
	if err != nil {
		dw.Close()
		return nil, err
	}
	return &rig{rt: rt, dw: dw, spy: spy, peer: peer, geo: geo, ctx: dw.Context()}, nil
}

func (r *rig) close() {
	r.dw.Close()
	_ = r.peer.Close()
}

// page is a full page image filled with a tenant's canary.
func (r *rig) page(tenant string) []byte {
	b := make([]byte, r.geo.PageBytes())
	if r.geo.Type == kv.F16 {
		h := quant.FP32ToFP16(canaries[tenant])
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], h)
		}
		return b
	}
	bits := math.Float32bits(canaries[tenant])
	for i := 0; i < len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], bits)
	}
	return b
}

// digest is what an honest prefill worker would commit for a prompt of
// tokens tokens whose pages are all tenant's canary.
func (r *rig) digest(tenant string, tokens int) []byte {
	o := kv.Owner{Tenant: tenant, ID: newID()}
	n := kv.PagesFor(tokens, r.geo.PageSize)
	refs, err := r.peer.Reserve(o, n)
	if err != nil {
		panic("incident: peer pool: " + err.Error())
	}
	defer r.peer.Release(o, refs)
	for b, ref := range refs {
		if err := r.peer.WritePage(o, ref, slotsOf(b, tokens, r.geo.PageSize), r.page(tenant)); err != nil {
			panic("incident: peer pool: " + err.Error())
		}
	}
	d, err := r.peer.Digest(o, refs, tokens)
	if err != nil {
		panic("incident: peer digest: " + err.Error())
	}
	return d[:]
}

// newID is a fresh handoff id; a counter is enough within one replay.
func newID() kv.ID {
	var id kv.ID
	binary.BigEndian.PutUint64(id[8:], ids.Add(1))
	return id
}

var ids atomic.Uint64

func slotsOf(block, tokens, ps int) int { return min(ps, tokens-block*ps) }

type handle struct {
	id     kv.ID
	tenant string
	res    *handoff.Reservation
	ts     handoff.TokenStream
}

func (r *rig) reserve(tenant string, prompt, maxTokens int) (*handle, error) {
	h := &handle{id: newID(), tenant: tenant}
	res, err := r.dw.Reserve(context.Background(), &handoff.Reserve{Handoff: h.id, Tenant: tenant, PromptTokens: prompt, MaxTokens: maxTokens, Model: engine.FingerprintOf(r.rt)})
	if err != nil {
		return nil, err
	}
	h.res = res
	ts, err := r.dw.Stream(context.Background(), h.id, handoff.StreamParams{IgnoreEOS: true})
	if err != nil {
		return nil, err
	}
	h.ts = ts
	return h, nil
}

// write sends block b of h with data, as the (mis)behaving peer decides.
func (r *rig) write(h *handle, b int, ref kv.PageRef, slots int, data []byte) error {
	return r.dw.Write(context.Background(), []handoff.PageWrite{{Handoff: h.id, Block: b, Page: ref, Slots: slots, Data: data, Checksum: handoff.Checksum(data)}})
}

// writeAll is an honest transfer of a prompt of tokens tokens.
func (r *rig) writeAll(h *handle, tokens int) error {
	for b, ref := range h.res.Pages {
		if err := r.write(h, b, ref, slotsOf(b, tokens, r.geo.PageSize), r.page(h.tenant)); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) commit(h *handle, tokens int, digest []byte) error {
	return r.dw.Commit(context.Background(), &handoff.Commit{Handoff: h.id, Tokens: tokens, Digest: digest, FirstToken: 1})
}

// drain reads h's token stream to its end: decoding runs, attention reads.
func (r *rig) drain(h *handle) error {
	timeout := time.After(30 * time.Second)
	for {
		type rcv struct {
			t   handoff.Token
			err error
		}
		ch := make(chan rcv, 1)
		go func() { t, err := h.ts.Recv(); ch <- rcv{t, err} }()
		select {
		case x := <-ch:
			if x.err == io.EOF {
				return nil
			}
			if x.err != nil {
				return x.err
			}
			if x.t.Err != nil {
				return x.t.Err
			}
			if x.t.Done {
				return nil
			}
		case <-timeout:
			return errors.New("incident: decode stream hung")
		}
	}
}

// victimRun is a legitimate request of the victim tenant that runs to the
// end and releases its pages, which LIFO hands to the next reservation.
func (r *rig) victimRun() error {
	const p = 3 * pageSize
	h, err := r.reserve("victim", p, 4)
	if err != nil {
		return fmt.Errorf("victim reserve: %w", err)
	}
	if err := r.writeAll(h, p); err != nil {
		return fmt.Errorf("victim write: %w", err)
	}
	if err := r.commit(h, p, r.digest("victim", p)); err != nil {
		return fmt.Errorf("victim commit: %w", err)
	}
	if err := r.drain(h); err != nil {
		return fmt.Errorf("victim decode: %w", err)
	}
	return nil
}

// firstErr keeps the first error of a sequence of steps, but runs them all:
// with safeguards off a step "succeeds" and the next shows what it let by.
type firstErr struct{ err error }

func (f *firstErr) add(what string, err error) {
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("%s: %w", what, err)
	}
}

// (a) The incident: the router rejected an over-long request but it went
// on anyway with a one-token placeholder: decode reserves the real length,
// prefill sends one page and "complete".
func caseRejectedBootstrap(r *rig) error {
	if err := r.victimRun(); err != nil {
		return err
	}
	prompt, maxTokens := 3*pageSize, r.ctx // prompt + max_tokens > context
	h, err := r.reserve("attacker", prompt, maxTokens)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.write(h, 0, h.res.Pages[0], 1, r.page("attacker")))
	f.add("commit", r.commit(h, 1, r.digest("attacker", 1)))
	f.add("decode", r.drain(h))
	return f.err
}

// (b) A short transfer: one page of three, and a commit claiming all.
func caseShortTransfer(r *rig) error {
	if err := r.victimRun(); err != nil {
		return err
	}
	const p = 2*pageSize + 5
	h, err := r.reserve("attacker", p, 4)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.write(h, 0, h.res.Pages[0], pageSize, r.page("attacker")))
	f.add("commit", r.commit(h, p, r.digest("attacker", p)))
	f.add("decode", r.drain(h))
	return f.err
}

// placed announces blocks as written one-sidedly (as an RDMA write would)
// without ever placing the bytes: the page keeps whatever it held.
func (r *rig) placed(h *handle, b, tokens int) error {
	data := r.page(h.tenant)
	return r.dw.Write(context.Background(), []handoff.PageWrite{{Handoff: h.id, Block: b, Page: h.res.Pages[b],
		Slots: slotsOf(b, tokens, r.geo.PageSize), Checksum: handoff.Checksum(data), Placed: true}})
}

// (c) Every block announced, but the bytes of all but the first never
// arrived; the commit's digest is over what should have arrived.
func caseWrongDigest(r *rig) error {
	if err := r.victimRun(); err != nil {
		return err
	}
	const p = 3 * pageSize
	h, err := r.reserve("attacker", p, 4)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.write(h, 0, h.res.Pages[0], pageSize, r.page("attacker")))
	for b := 1; b < len(h.res.Pages); b++ {
		f.add("write", r.placed(h, b, p))
	}
	f.add("commit", r.commit(h, p, r.digest("attacker", p)))
	f.add("decode", r.drain(h))
	return f.err
}

// (d) As (c), with no digest at all.
func caseNoDigest(r *rig) error {
	if err := r.victimRun(); err != nil {
		return err
	}
	const p = 3 * pageSize
	h, err := r.reserve("attacker", p, 4)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.write(h, 0, h.res.Pages[0], pageSize, r.page("attacker")))
	for b := 1; b < len(h.res.Pages); b++ {
		f.add("write", r.placed(h, b, p))
	}
	f.add("commit", r.commit(h, p, nil))
	f.add("decode", r.drain(h))
	return f.err
}

// (e) A writer whose handoff was aborted keeps writing one-sidedly (an
// RDMA write cannot be recalled) after its pages went, LIFO, to another
// tenant's handoff.
func caseStaleWriter(r *rig) error {
	const p = 2 * pageSize
	stale, err := r.reserve("writer", p, 4)
	if err != nil {
		return fmt.Errorf("writer reserve: %w", err)
	}
	if err := r.dw.Abort(context.Background(), &handoff.Abort{Handoff: stale.id, Reason: "prefill timed out"}); err != nil {
		return err
	}
	h, err := r.reserve("attacker", p, 4)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.writeAll(h, p))
	// The late one-sided write lands on the pool directly, under the
	// aborted handoff's owner and page generation, in a page that now holds
	// the new handoff's prompt. (A page past the prompt is outside the
	// digest; there the page tags and the written extent guard alone.)
	o := kv.Owner{Tenant: "writer", ID: stale.id}
	target := stale.res.Pages[0]
	for _, sr := range stale.res.Pages {
		for _, ar := range h.res.Pages {
			if sr.Page == ar.Page {
				target = sr
			}
		}
	}
	f.add("late write", r.spy.WritePage(o, target, pageSize, r.page("writer")))
	f.add("commit", r.commit(h, p, r.digest("attacker", p)))
	f.add("decode", r.drain(h))
	return f.err
}

// (f) A peer writes its block 0 into a page reserved for another tenant's
// handoff.
func caseForeignPages(r *rig) error {
	const p = 2 * pageSize
	v, err := r.reserve("victim", p, 4)
	if err != nil {
		return fmt.Errorf("victim reserve: %w", err)
	}
	if err := r.writeAll(v, p); err != nil {
		return fmt.Errorf("victim write: %w", err)
	}
	h, err := r.reserve("attacker", p, 4)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var f firstErr
	f.add("write", r.write(h, 0, v.res.Pages[0], pageSize, r.page("attacker")))
	f.add("write", r.write(h, 1, h.res.Pages[1], pageSize, r.page("attacker")))
	f.add("commit", r.commit(h, p, r.digest("attacker", p)))
	f.add("victim commit", r.commit(v, p, r.digest("victim", p)))
	f.add("decode", r.drain(h))
	f.add("victim decode", r.drain(v))
	return f.err
}

// spyPool watches every block attention reads and records any canary of a
// tenant other than the reading sequence's.
type spyPool struct {
	engine.PagePool
	mu     sync.Mutex
	leaked string
}

// Raw keeps the worker's pool metrics and drain checks on the real pool.
func (s *spyPool) Raw() *kv.Pool {
	if r, ok := s.PagePool.(interface{ Raw() *kv.Pool }); ok {
		return r.Raw()
	}
	return nil
}

func (s *spyPool) View(o kv.Owner, table []kv.PageRef) model.KV {
	return &spyView{KV: s.PagePool.View(o, table), s: s, tenant: o.Tenant}
}

func (s *spyPool) leak() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaked
}

type spyView struct {
	model.KV
	s      *spyPool
	tenant string
}

func (v *spyView) Block(layer, blk int) ([]float32, []float32, int, error) {
	k, val, n, err := v.KV.Block(layer, blk)
	if err == nil {
		for _, rows := range [][]float32{k, val} {
			for _, x := range rows {
				v.look(x, layer, blk)
			}
		}
	}
	return k, val, n, err
}

// F16 and Block16 pass an F16 view's reads through the same watch.
func (v *spyView) F16() bool {
	k16, ok := v.KV.(model.KV16)
	return ok && k16.F16()
}

func (v *spyView) Block16(layer, blk int) ([]uint16, []uint16, int, error) {
	k, val, n, err := v.KV.(model.KV16).Block16(layer, blk)
	if err == nil {
		for _, rows := range [][]uint16{k, val} {
			for _, h := range rows {
				v.look(quant.FP16ToFP32(h), layer, blk)
			}
		}
	}
	return k, val, n, err
}

func (v *spyView) look(x float32, layer, blk int) {
	for t, c := range canaries {
		if x == c && t != v.tenant {
			v.s.mu.Lock()
			if v.s.leaked == "" {
				v.s.leaked = fmt.Sprintf("%s's KV read by a %s sequence (layer %d, block %d)", t, v.tenant, layer, blk)
			}
			v.s.mu.Unlock()
		}
	}
}

// Verdict is "" when the matrix holds: every case errors with all
// safeguards on, and each case is stopped (no leak) by at least one
// safeguard alone. Otherwise it says which case broke the rule.
func Verdict(cells []Cell) string {
	at := map[[2]string]Outcome{}
	for _, c := range cells {
		at[[2]string{c.Case, c.Setting}] = c.Outcome
	}
	for _, c := range Cases {
		if o := at[[2]string{c.Key, SettingAll}]; o != OutcomeError {
			return fmt.Sprintf("case (%s) ended %q with every safeguard on", c.Key, o)
		}
		stopped := false
		for _, s := range Settings {
			if s != SettingAll && s != SettingNone && at[[2]string{c.Key, s}] != OutcomeLeak {
				stopped = true
			}
		}
		if !stopped {
			return fmt.Sprintf("no safeguard alone stops case (%s)", c.Key)
		}
	}
	return ""
}
