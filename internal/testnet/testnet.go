// Package testnet is a packet-level network impairment for tests: netem's
// job done in userspace, because the kernels sluice is tested on may lack
// the netem and tbf qdiscs (this one does: "Specified qdisc kind is
// unknown", no modules to load).
//
// Each Node is its own network namespace holding a loopback and one TUN
// device with an address in 10.77.0.0/24. A forwarder in the test process
// reads every IPv4 packet a namespace sends through its TUN and writes it
// to the TUN of the namespace that owns the destination address, applying
// the impairment set for that (source, destination) path: seeded loss,
// duplication, delay with jitter, reordering, full partitions that can
// be healed at any time, and holding a path's packets for the test to
// pass on one at a time. The kernels' TCP stacks on either side see real
// loss, retransmits, duplicates and reordering; nothing in sluice knows.
//
// Why TUN and not veth + nftables: nftables can drop (loss, partitions)
// but cannot delay, reorder or duplicate a packet; all of those need the
// packet in userspace, and TUN puts it there without a kernel module.
//
// Processes are started inside a namespace by forking from an OS thread
// that entered it (Node.Start), and the test reaches a namespace's
// loopback listeners by dialing from that thread (Node.DialContext), so
// nothing is added to the host's own network namespace.
//
// It needs root (CAP_NET_ADMIN) and /dev/net/tun: Available says why not.
// This package is for tests only; nothing in the serving path imports it.
package testnet

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// Impair is what a path does to the packets on it, in netem's terms.
// The zero value passes every packet at once.
type Impair struct {
	// Partition drops every packet (a cut cable; heal with a zero Impair).
	Partition bool
	// Loss is the probability a packet is dropped.
	Loss float64
	// Duplicate is the probability a packet is sent twice (the copy with
	// its own delay).
	Duplicate float64
	// Delay is added to every packet; Jitter spreads it uniformly over
	// [Delay-Jitter, Delay+Jitter], so packets overtake each other.
	Delay, Jitter time.Duration
	// Reorder is the probability a packet skips the delay altogether
	// (netem's reorder: it overtakes the delayed ones).
	Reorder float64
	// Hold keeps every packet of the path, in order, until Release
	// passes them on one at a time, so a test can step a connection
	// packet by packet (e.g. let a stream's first token through and
	// nothing after it). When the path's impairment changes, what is
	// held is dropped if the new one is a Partition and delivered at
	// once otherwise. Hold ignores the other fields.
	Hold bool
}

func (i Impair) String() string {
	if i.Partition {
		return "partition"
	}
	if i.Hold {
		return "hold"
	}
	return fmt.Sprintf("loss %.0f%% dup %.0f%% delay %v±%v reorder %.0f%%", i.Loss*100, i.Duplicate*100, i.Delay, i.Jitter, i.Reorder*100)
}

// Stats counts what the forwarder did since the Net was made.
type Stats struct {
	Forwarded, Dropped, Duplicated, Delayed, Reordered int64
}

func (s Stats) String() string {
	return fmt.Sprintf("%d packets forwarded, %d dropped, %d duplicated, %d delayed, %d sent ahead of delayed ones",
		s.Forwarded, s.Dropped, s.Duplicated, s.Delayed, s.Reordered)
}

// Net is a star of namespaces around the forwarder.
type Net struct {
	mu     sync.Mutex
	rng    *rand.Rand
	nodes  map[netip.Addr]*Node
	paths  map[[2]netip.Addr]Impair
	all    Impair // for paths with no entry of their own
	held   map[[2]netip.Addr][]heldPacket
	closed bool

	line  delayLine
	stats struct{ fwd, drop, dup, delayed, reord atomic.Int64 }
	wg    sync.WaitGroup
}

// New makes an empty network whose random choices follow seed.
func New(seed uint64) *Net {
	n := &Net{rng: rand.New(rand.NewPCG(seed, 0x5e1ce)), nodes: map[netip.Addr]*Node{}, paths: map[[2]netip.Addr]Impair{},
		held: map[[2]netip.Addr][]heldPacket{}}
	n.line.init()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.line.run() }()
	return n
}

// Node is one network namespace on the Net.
type Node struct {
	Name string
	// Addr is the namespace's address on the Net (its TUN's).
	Addr netip.Addr
	net  *Net
	ns   *nsThread
	tun  *os.File
}

// AddNode makes a namespace with loopback up and a TUN at the next free
// address in 10.77.0.0/24, and starts forwarding its packets.
func (n *Net) AddNode(name string) (*Node, error) {
	n.mu.Lock()
	addr := netip.AddrFrom4([4]byte{10, 77, 0, byte(len(n.nodes) + 1)})
	n.mu.Unlock()
	ns, err := newNSThread()
	if err != nil {
		return nil, err
	}
	var tun *os.File
	if err := ns.do(func() error {
		var err error
		tun, err = setupNamespace(addr)
		return err
	}); err != nil {
		ns.close()
		return nil, fmt.Errorf("testnet: namespace %s: %w", name, err)
	}
	nd := &Node{Name: name, Addr: addr, net: n, ns: ns, tun: tun}
	n.mu.Lock()
	n.nodes[addr] = nd
	n.mu.Unlock()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.forward(nd) }()
	return nd, nil
}

// Start starts cmd inside the node's namespace (its only network is the
// namespace's loopback and TUN).
func (nd *Node) Start(cmd *exec.Cmd) error {
	return nd.ns.do(cmd.Start)
}

// DialContext opens a connection from inside the node's namespace (e.g.
// to a role listening on the namespace's 127.0.0.1); for http.Transport.
func (nd *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := nd.ns.do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the node's namespace.
func (nd *Node) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := nd.ns.do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// HostPort is the node's address with port.
func (nd *Node) HostPort(port int) string {
	return netip.AddrPortFrom(nd.Addr, uint16(port)).String()
}

// Set sets the impairment of the path from a to b (one direction).
func (n *Net) Set(from, to *Node, i Impair) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]netip.Addr{from.Addr, to.Addr}
	n.paths[k] = i
	n.settleHeld(k)
}

// SetBoth sets the impairment of both directions between a and b.
func (n *Net) SetBoth(a, b *Node, i Impair) {
	n.Set(a, b, i)
	n.Set(b, a, i)
}

// Isolate partitions nd from every other node, both directions.
func (n *Net) Isolate(nd *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for a := range n.nodes {
		if a != nd.Addr {
			for _, k := range [][2]netip.Addr{{a, nd.Addr}, {nd.Addr, a}} {
				n.paths[k] = Impair{Partition: true}
				n.settleHeld(k)
			}
		}
	}
}

// SetAll sets the impairment of every path and forgets per-path ones.
func (n *Net) SetAll(i Impair) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = i
	clear(n.paths)
	for k := range n.held {
		n.settleHeld(k)
	}
}

// heldPacket is a packet a Hold path keeps, with where it goes.
type heldPacket struct {
	to  *os.File
	pkt []byte
}

// impairOf is the impairment of path k. n.mu is held.
func (n *Net) impairOf(k [2]netip.Addr) Impair {
	if i, ok := n.paths[k]; ok {
		return i
	}
	return n.all
}

// settleHeld applies path k's impairment, just changed, to the packets
// it held: kept while it still holds, dropped by a partition, delivered
// in order otherwise. n.mu is held (so the forwarder cannot pass a newer
// packet of the path first).
func (n *Net) settleHeld(k [2]netip.Addr) {
	q := n.held[k]
	imp := n.impairOf(k)
	if len(q) == 0 || imp.Hold {
		return
	}
	delete(n.held, k)
	for _, p := range q {
		if imp.Partition {
			n.stats.drop.Add(1)
			continue
		}
		n.stats.fwd.Add(1)
		p.to.Write(p.pkt)
	}
}

// Release passes on the oldest packet a Hold path from -> to keeps, and
// says how many bytes of TCP payload it carried (0 for a bare ACK or a
// packet that is not TCP) and whether there was one.
func (n *Net) Release(from, to *Node) (payload int, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]netip.Addr{from.Addr, to.Addr}
	q := n.held[k]
	if len(q) == 0 {
		return 0, false
	}
	p := q[0]
	if len(q) == 1 {
		delete(n.held, k)
	} else {
		n.held[k] = q[1:]
	}
	n.stats.fwd.Add(1)
	p.to.Write(p.pkt)
	return tcpPayload(p.pkt), true
}

// Next says how many bytes of TCP payload the oldest packet a Hold path
// from -> to keeps carries, without passing it on, and whether there is
// one.
func (n *Net) Next(from, to *Node) (payload int, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.held[[2]netip.Addr{from.Addr, to.Addr}]
	if len(q) == 0 {
		return 0, false
	}
	return tcpPayload(q[0].pkt), true
}

// Held is how many packets the path from -> to holds now, and their TCP
// payload bytes.
func (n *Net) Held(from, to *Node) (packets, payload int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.held[[2]netip.Addr{from.Addr, to.Addr}] {
		packets++
		payload += tcpPayload(p.pkt)
	}
	return packets, payload
}

// tcpPayload is the TCP payload length of an IPv4 packet (0 if it is not
// TCP or is cut short).
func tcpPayload(pkt []byte) int {
	if len(pkt) < 20 || pkt[9] != 6 {
		return 0
	}
	ihl := int(pkt[0]&0xf) * 4
	if len(pkt) < ihl+20 {
		return 0
	}
	total := int(binary.BigEndian.Uint16(pkt[2:4]))
	return max(min(total, len(pkt))-ihl-int(pkt[ihl+12]>>4)*4, 0)
}

// Heal removes every impairment.
func (n *Net) Heal() { n.SetAll(Impair{}) }

// Stats returns what the forwarder did so far.
func (n *Net) Stats() Stats {
	return Stats{n.stats.fwd.Load(), n.stats.drop.Load(), n.stats.dup.Load(), n.stats.delayed.Load(), n.stats.reord.Load()}
}

// Close stops forwarding and removes the namespaces (a namespace lives on
// while a process started in it does: stop those first).
func (n *Net) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	nodes := n.nodes
	n.mu.Unlock()
	for _, nd := range nodes {
		nd.tun.SetReadDeadline(time.Now())
	}
	n.line.stop()
	n.wg.Wait()
	for _, nd := range nodes {
		nd.tun.Close()
		nd.ns.close()
	}
}

// forward moves nd's outgoing packets to their destinations.
func (n *Net) forward(nd *Node) {
	buf := make([]byte, 65536)
	for {
		k, err := nd.tun.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		pkt := buf[:k]
		if k < 20 || pkt[0]>>4 != 4 {
			continue // IPv4 only; the kernel's odd IPv6 probe goes nowhere
		}
		dst := netip.AddrFrom4([4]byte(pkt[16:20]))
		n.mu.Lock()
		to := n.nodes[dst]
		path := [2]netip.Addr{nd.Addr, dst}
		imp := n.impairOf(path)
		var copies int
		var delays [2]time.Duration
		switch {
		case to == nil:
		case imp.Hold:
			n.held[path] = append(n.held[path], heldPacket{to.tun, append([]byte(nil), pkt...)})
		case imp.Partition || (imp.Loss > 0 && n.rng.Float64() < imp.Loss):
			n.stats.drop.Add(1)
		default:
			copies = 1
			if imp.Duplicate > 0 && n.rng.Float64() < imp.Duplicate {
				copies = 2
				n.stats.dup.Add(1)
			}
			for c := range copies {
				d := imp.Delay
				if imp.Jitter > 0 {
					d += time.Duration(n.rng.Int64N(int64(2*imp.Jitter)+1)) - imp.Jitter
				}
				if imp.Reorder > 0 && n.rng.Float64() < imp.Reorder && d > 0 {
					d = 0
					n.stats.reord.Add(1)
				}
				delays[c] = max(d, 0)
			}
		}
		n.mu.Unlock()
		for c := range copies {
			n.stats.fwd.Add(1)
			if delays[c] == 0 {
				to.tun.Write(pkt)
				continue
			}
			n.stats.delayed.Add(1)
			n.line.add(time.Now().Add(delays[c]), to.tun, append([]byte(nil), pkt...))
		}
	}
}

// delayLine holds delayed packets until they are due, in order of due
// time (and of arrival for equal times, so a fixed delay keeps order).
type delayLine struct {
	mu   sync.Mutex
	q    pktHeap
	seq  uint64
	wake chan struct{}
	done chan struct{}
}

type pending struct {
	due time.Time
	seq uint64
	to  *os.File
	pkt []byte
}

type pktHeap []pending

func (h pktHeap) Len() int { return len(h) }
func (h pktHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h pktHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pktHeap) Push(x any)   { *h = append(*h, x.(pending)) }
func (h *pktHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}

func (l *delayLine) init() {
	l.wake = make(chan struct{}, 1)
	l.done = make(chan struct{})
}

func (l *delayLine) add(due time.Time, to *os.File, pkt []byte) {
	l.mu.Lock()
	l.seq++
	heap.Push(&l.q, pending{due, l.seq, to, pkt})
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *delayLine) stop() { close(l.done) }

func (l *delayLine) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		var wait time.Duration = time.Hour
		for l.q.Len() > 0 {
			if w := time.Until(l.q[0].due); w > 0 {
				wait = w
				break
			}
			p := heap.Pop(&l.q).(pending)
			l.mu.Unlock()
			p.to.Write(p.pkt)
			l.mu.Lock()
		}
		l.mu.Unlock()
		t.Reset(wait)
		select {
		case <-l.done:
			return
		case <-l.wake:
		case <-t.C:
		}
	}
}
