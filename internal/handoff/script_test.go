package handoff

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScripts drives the Receiver with the data-driven scripts in
// testdata/*.txt (etcd raft style). Each line is
//
//	command args... -> expected outcome
//
// Commands:
//
//	config [one-sided] [lease=5s] [no-count] [no-coverage] [no-digest] [no-match] [no-checksum]
//	reserve h=N prompt=P [max=M] [tenant=T]        -> ok pages=K | error CODE
//	write h=N block=B [page=H:B] [gen=+D] [slots=S] [corrupt] [placed]  -> ok | error CODE
//	commit h=N [tokens=T] [digest=ok|bad|none]     -> ok | error CODE
//	abort h=N | drained h=N | tick DURATION        -> ok
//	stats                                          -> reserved=.. accepted=.. aborted=.. late=.. live=.. failed=code:n,...
//	drained-pool                                   -> ok | error
//
// The page size is 4 slots of 8 bytes; handoff N's data is a pattern of N.
func TestScripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type scriptEnv struct {
	pool *memPool
	r    *Receiver
	now  time.Time
	res  map[int]*Reservation
	src  map[int]*seqSource
}

func (e *scriptEnv) reset(cfg ReceiverConfig) {
	cfg.PageSize = tPS
	if cfg.Lease == 0 {
		cfg.Lease = time.Second
	}
	e.pool = newMemPool(16, tPS, tPS*tBPS)
	e.r = NewReceiver(cfg, e.pool)
	e.now = t0
	e.res = map[int]*Reservation{}
	e.src = map[int]*seqSource{}
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if he, ok := err.(*Error); ok {
		return "error " + string(he.Code)
	}
	return "error " + err.Error()
}

func runScript(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &scriptEnv{}
	e.reset(ReceiverConfig{})
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, want, ok := strings.Cut(line, "->")
		if !ok {
			t.Fatalf("%s:%d: no '->' in %q", path, n+1, line)
		}
		got, err := e.run(strings.Fields(cmd))
		if err != nil {
			t.Fatalf("%s:%d: %v", path, n+1, err)
		}
		if want = strings.TrimSpace(want); got != want {
			t.Errorf("%s:%d: %s\n  got  %s\n  want %s", path, n+1, strings.TrimSpace(cmd), got, want)
		}
	}
}

func (e *scriptEnv) run(f []string) (string, error) {
	args := map[string]string{}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	num := func(k string, def int) int {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			panic(fmt.Sprintf("%s=%q is not a number", k, v))
		}
		return n
	}
	h := num("h", 0)
	switch f[0] {
	case "config":
		var cfg ReceiverConfig
		_, cfg.OneSided = args["one-sided"]
		_, cfg.Safeguards.NoCount = args["no-count"]
		_, cfg.Safeguards.NoCoverage = args["no-coverage"]
		_, cfg.Safeguards.NoDigest = args["no-digest"]
		_, cfg.Safeguards.NoReservationMatch = args["no-match"]
		_, cfg.Safeguards.NoChecksum = args["no-checksum"]
		if v, ok := args["lease"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", err
			}
			cfg.Lease = d
		}
		e.reset(cfg)
		return "ok", nil
	case "reserve":
		tenant := args["tenant"]
		if tenant == "" {
			tenant = "acme"
		}
		res, err := e.r.Reserve(e.now, &Reserve{Handoff: hid(byte(h)), Tenant: tenant, PromptTokens: num("prompt", 0), MaxTokens: num("max", 0)})
		if err != nil {
			return outcome(err), nil
		}
		e.res[h] = res
		e.src[h] = newSeqSource(res.ExpectTokens, tPS, tBPS, byte(h))
		return fmt.Sprintf("ok pages=%d", len(res.Pages)), nil
	case "write":
		res, src := e.res[h], e.src[h]
		if res == nil {
			return "", fmt.Errorf("handoff %d was never reserved", h)
		}
		blk := num("block", 0)
		sb := min(blk, len(src.pages)-1)
		data := append([]byte(nil), src.pages[sb]...)
		w := PageWrite{Handoff: hid(byte(h)), Block: blk, Slots: num("slots", src.slots[sb]), Data: data, Checksum: Checksum(data)}
		w.Page = res.Pages[min(blk, len(res.Pages)-1)]
		if v, ok := args["page"]; ok { // page=H:B names handoff H's block B
			oh, ob, _ := strings.Cut(v, ":")
			ohn, _ := strconv.Atoi(oh)
			obn, _ := strconv.Atoi(ob)
			w.Page = e.res[ohn].Pages[obn]
		}
		w.Page.Gen += uint64(num("gen", 0))
		if _, ok := args["corrupt"]; ok {
			w.Data[0] ^= 0xFF
		}
		if _, ok := args["placed"]; ok {
			copy(e.pool.data[w.Page.Page], w.Data)
			w.Data, w.Placed = nil, true
		}
		return outcome(e.r.Write(e.now, []PageWrite{w})), nil
	case "commit":
		src := e.src[h]
		c := &Commit{Handoff: hid(byte(h)), Tokens: num("tokens", 0)}
		if src != nil {
			d, _ := src.Digest()
			c.Tokens = num("tokens", e.res[h].ExpectTokens)
			switch args["digest"] {
			case "", "ok":
				c.Digest = d
			case "bad":
				c.Digest = append([]byte{d[0] ^ 1}, d[1:]...)
			case "none":
			}
		}
		_, err := e.r.Commit(e.now, c)
		return outcome(err), nil
	case "abort":
		if e.r.Abort(e.now, hid(byte(h)), "script") {
			return "ok", nil
		}
		return "ok not-live", nil
	case "drained":
		return outcome(e.r.Drained(e.now, hid(byte(h)))), nil
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return "", err
		}
		e.now = e.now.Add(d)
		e.r.Tick(e.now)
		return "ok", nil
	case "stats":
		s := e.r.Stats()
		var fs []string
		for c, n := range s.Failed {
			fs = append(fs, fmt.Sprintf("%s:%d", c, n))
		}
		sort.Strings(fs)
		return fmt.Sprintf("reserved=%d accepted=%d aborted=%d late=%d live=%d failed=%s",
			s.Reserved, s.Accepted, s.Aborted, s.LateWrites, s.Live, strings.Join(fs, ",")), nil
	case "drained-pool":
		// Accepted handoffs belong to a decoder: the script releases them here.
		for hh := range e.res {
			id := hid(byte(hh))
			if e.r.accepted(id) {
				e.pool.Release(e.r.live[id].owner, e.r.live[id].refs)
			}
		}
		if err := e.pool.CheckDrained(); err != nil {
			return "error " + strings.SplitN(err.Error(), ":", 2)[0], nil
		}
		return "ok", nil
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}
