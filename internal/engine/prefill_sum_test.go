package engine

import (
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// The prefill worker's source gives the Sender, from one hash per page,
// exactly handoff.Checksum of each page image (full pages and the short
// last one), and the pool's digest afterwards is the one computed afresh.
func TestPoolSourcePageSum(t *testing.T) {
	g := kv.Geometry{Layers: 2, KVDim: 16, PageSize: 4} // 1 KiB pages
	p, err := kv.New(kv.Config{Geometry: g, Pages: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	o := kv.Owner{Tenant: "t", ID: kv.ID{1}}
	const tokens = 4 + 3
	refs, _ := p.Reserve(o, 2)
	img := make([]byte, g.PageBytes())
	for i := range img {
		img[i] = byte(i*7 + 1)
	}
	p.WritePage(o, refs[0], 4, img)
	p.WritePage(o, refs[1], 3, img)
	fresh, err := p.Digest(o, refs, tokens) // before any recorded hash
	if err != nil {
		t.Fatal(err)
	}
	src := &poolSource{pool: kvPool{p}, owner: o, table: refs, tokens: tokens}
	for b := range refs {
		data, n, sum, summed, err := src.PageSum(b)
		if err != nil {
			t.Fatal(err)
		}
		if !summed {
			sum = handoff.Checksum(data)
		}
		if sum != handoff.Checksum(data) || n != min(4, tokens-4*b) {
			t.Fatalf("block %d: checksum %08x (summed %v), image hashes to %08x; %d slots", b, sum, summed, handoff.Checksum(data), n)
		}
	}
	d, err := src.Digest()
	if err != nil || string(d) != string(fresh[:]) {
		t.Fatalf("digest from recorded hashes %x (%v), afresh %x", d, err, fresh)
	}
	if _, _, _, _, err := src.PageSum(2); err == nil {
		t.Fatal("a block outside the table was read")
	}
}
