package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testnet"
)

// The chaos test's two moves made exact. Under load the random faults
// may catch every request of a decode worker before its first token (seen
// at GOMAXPROCS=1: 66 retries, no migration), so "some stream migrated"
// depended on timing. Here the forwarder holds a path's packets
// (testnet's Hold) and passes them on one at a time, so the test knows,
// not guesses, where a request stands when its decode worker is cut off:
//
//   - a held stream: of every packet from the decode workers to the
//     router, packets are released until the client has its first token,
//     and never (pings aside) more than half of the bytes the whole stream
//     takes on the wire, so its end is still held; then the decode worker that serves
//     it (the router's sluice_cluster_in_flight) is partitioned and what
//     it held dropped. The stream must migrate and end equal to the
//     reference.
//   - before the first token: of every packet from the prefill workers to
//     the decode workers, only small ones (pings) are released, until a
//     decode worker's next one is page data; that worker is partitioned.
//     The request must be retried on the other pair (not migrated) and
//     end equal to the reference.
type moveProbe struct {
	n      *testnet.Net
	rt     *role
	decs   []*role
	key    string
	prompt string
	want   string
	tokens int // want's completion tokens
}

// probeEnd is how a probe's request ended.
type probeEnd struct {
	text, finish string
	err          error
}

func (e probeEnd) outcome(want string) string {
	if e.err == nil && e.text == want && e.finish != "" {
		return "exact"
	}
	return "NOT exact"
}

// send streams the probe's request through the router; first is closed
// when the client has text, end gets the outcome.
func (m *moveProbe) send() (first chan struct{}, end chan probeEnd) {
	first, end = make(chan struct{}), make(chan probeEnd, 1)
	cl := openai.NewClient(option.WithBaseURL("http://127.0.0.1:8000/v1/"), option.WithAPIKey(m.key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &http.Transport{DialContext: m.rt.node.DialContext}}))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "stories260K",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(m.prompt)},
			MaxTokens: openai.Int(chaosTokens), Temperature: openai.Float(0)})
		var e probeEnd
		var text strings.Builder
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) > 0 {
				had := text.Len() > 0
				text.WriteString(ch.Choices[0].Text)
				if !had && text.Len() > 0 {
					close(first)
				}
				if ch.Choices[0].FinishReason != "" {
					e.finish = string(ch.Choices[0].FinishReason)
				}
			}
		}
		e.text, e.err = text.String(), st.Err()
		end <- e
	}()
	return first, end
}

// metric is one sample of the role's /metrics (-1 if it cannot be read).
func (m *moveProbe) metric(r *role, name string) float64 {
	code, body := r.get("/metrics")
	if code != 200 {
		return -1
	}
	return metricSample(body, name)
}

// metricSample is the value of name in a /metrics body (0 if absent).
func metricSample(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func workerMetric(name, role string, w *role) string {
	return name + `{role="` + role + `",worker="` + w.node.HostPort(7000) + `"}`
}

// waitUp waits until the router counts every decode worker up (after the
// faults, a restarted or healed one is found again within its probes).
func (m *moveProbe) waitUp(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, d := range m.decs {
		for m.metric(m.rt, workerMetric("sluice_cluster_worker_up", "decode", d)) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not up on the router 30s after the faults", d.node.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// serving is the decode worker the router has the probe's request on now
// (nil if none or, impossibly with one request, several).
func (m *moveProbe) serving() *role {
	code, body := m.rt.get("/metrics")
	if code != 200 {
		return nil
	}
	var on *role
	for _, d := range m.decs {
		if metricSample(body, workerMetric("sluice_cluster_in_flight", "decode", d)) > 0 {
			if on != nil {
				return nil
			}
			on = d
		}
	}
	return on
}

// moves reads the router's migration and retry counters.
func (m *moveProbe) moves() (migrated, retried float64) {
	return m.metric(m.rt, "sluice_cluster_migrations_total"), m.metric(m.rt, "sluice_cluster_retries_total")
}

// hold holds every decode worker's packets to the router.
func (m *moveProbe) hold() {
	for _, d := range m.decs {
		m.n.Set(d.node, m.rt.node, testnet.Impair{Hold: true})
	}
}

// cut partitions on from everything (what it held is dropped) and ends
// the hold of the other decode workers (what they held is delivered).
func (m *moveProbe) cut(on *role) {
	m.n.Isolate(on.node)
	for _, d := range m.decs {
		if d != on {
			m.n.Set(d.node, m.rt.node, testnet.Impair{})
		}
	}
}

// wait is the probe request's outcome, the network healed after it.
func (m *moveProbe) wait(t *testing.T, end chan probeEnd) probeEnd {
	t.Helper()
	defer m.n.Heal()
	select {
	case e := <-end:
		return e
	case <-time.After(90 * time.Second):
		t.Fatal("the probe request did not end within 90s")
	}
	return probeEnd{}
}

// heldStreamMigrates is the first probe: a stream past its first token
// whose decode worker is cut off migrates and ends exact. It says what
// it did, for the report.
func (m *moveProbe) heldStreamMigrates(t *testing.T) string {
	t.Helper()
	m.waitUp(t)
	mig0, _ := m.moves()
	m.hold()
	first, end := m.send()
	// The whole stream is more than 32 bytes a token on the wire (a
	// frame's header and tag, encrypted off loopback, and the token):
	// releasing at most half of that per worker leaves its end held,
	// however late the client sees its first token. Packets of at most
	// 32 bytes of payload hold no token (a ping is exactly a header and a
	// tag) and are not counted, so a slow prefill's pings cannot use the
	// allowance up (and keep the link alive meanwhile).
	const pingBytes = 32
	limit := m.tokens * pingBytes / 2
	released := make([]int, len(m.decs))
	deadline := time.Now().Add(30 * time.Second)
	gotFirst := false
	for !gotFirst {
		select {
		case e := <-end:
			m.n.Heal()
			t.Fatalf("held stream: ended before the client saw a token (released %v payload bytes): %q, %v", released, e.text, e.err)
		default:
		}
		if time.Now().After(deadline) {
			m.n.Heal()
			t.Fatalf("held stream: no token reached the client within 30s (released %v payload bytes of at most %d per worker)", released, limit)
		}
		for i, d := range m.decs {
			if released[i] < limit {
				if p, _ := m.n.Release(d.node, m.rt.node); p > pingBytes {
					released[i] += p
				}
			}
		}
		select {
		case <-first:
			gotFirst = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	on := m.serving()
	if on == nil {
		m.n.Heal()
		t.Fatal("held stream: the router's sluice_cluster_in_flight names no single decode worker for it")
	}
	held, heldBytes := m.n.Held(on.node, m.rt.node)
	m.cut(on)
	e := m.wait(t, end)
	mig, _ := m.moves()
	if e.err != nil || e.text != m.want || e.finish == "" {
		t.Errorf("held stream: cut off from %s after its first token, it ended with %q (finish %q), %v; want the reference %q", on.node.Name, e.text, e.finish, e.err, m.want)
	}
	if mig-mig0 < 1 {
		t.Errorf("held stream: the router counts %v migrations for it; its decode worker was cut off after its first token", mig-mig0)
	}
	return fmt.Sprintf("held stream: %s cut off after its first token, with %d packets (%d payload bytes) of the stream held; %v migrations, %s",
		on.node.Name, held, heldBytes, mig-mig0, e.outcome(m.want))
}

// beforeFirstRetries is the second probe: a request whose decode worker
// is cut off while the prefill worker pushes it the prompt's pages (the
// router reserved there and opened the stream; the commit, and so the
// first token, cannot have come) is retried on the other pair, not
// migrated, and ends exact. It says what it did, for the report.
//
// The forwarder holds every prefill -> decode path and passes on, in
// order, only packets of under pushBytes of payload (pings, acks), so
// each link stays alive, until one path's oldest held packet is bigger:
// page data. TCP delivers in order, so nothing behind it (the commit)
// reaches that decode worker's process.
func (m *moveProbe) beforeFirstRetries(t *testing.T, pres []*role) string {
	t.Helper()
	const pushBytes = 200
	m.waitUp(t)
	mig0, ret0 := m.moves()
	for _, p := range pres {
		for _, d := range m.decs {
			m.n.Set(p.node, d.node, testnet.Impair{Hold: true})
		}
	}
	first, end := m.send()
	var on *role
	for deadline := time.Now().Add(30 * time.Second); on == nil; {
		if time.Now().After(deadline) {
			m.n.Heal()
			t.Fatalf("before the first token: no prefill worker pushed pages to a decode worker within 30s")
		}
		for _, p := range pres {
			for _, d := range m.decs {
				for {
					next, ok := m.n.Next(p.node, d.node)
					if !ok {
						break
					}
					if next >= pushBytes {
						on = d
						break
					}
					m.n.Release(p.node, d.node)
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	m.n.Isolate(on.node)
	for _, p := range pres {
		for _, d := range m.decs {
			if d != on {
				m.n.Set(p.node, d.node, testnet.Impair{})
			}
		}
	}
	select {
	case <-first:
		t.Errorf("before the first token: the client has text although no page reached %s", on.node.Name)
	default:
	}
	e := m.wait(t, end)
	mig, ret := m.moves()
	if e.err != nil || e.text != m.want || e.finish == "" {
		t.Errorf("before the first token: cut off from %s while its prompt's pages were pushed, the request ended with %q (finish %q), %v; want the reference %q", on.node.Name, e.text, e.finish, e.err, m.want)
	}
	if ret-ret0 < 1 || mig != mig0 {
		t.Errorf("before the first token: the router counts %v retries and %v migrations for it; want a retry and no migration", ret-ret0, mig-mig0)
	}
	return fmt.Sprintf("before the first token: %s cut off while its prompt's pages were pushed; %v retries, %v migrations, %s", on.node.Name, ret-ret0, mig-mig0, e.outcome(m.want))
}
