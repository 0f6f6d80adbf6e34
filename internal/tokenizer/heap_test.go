package tokenizer

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestQueuesPopInOrder: both work queues pop exactly the order a stable
// sort by the merge priority gives (ties on the key broken by left index).
func TestQueuesPopInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for round := 0; round < 200; round++ {
		n := r.IntN(300)
		var sq spmQueue
		var bq bpeQueue
		var ss []spmBigram
		var bs []bpeBigram
		for i := 0; i < n; i++ {
			s := spmBigram{left: int32(r.IntN(50)), score: float32(r.IntN(5)) - 2}
			b := bpeBigram{left: int32(r.IntN(50)), rank: uint32(r.IntN(5))}
			sq.push(s)
			bq.push(b)
			ss, bs = append(ss, s), append(bs, b)
		}
		sort.SliceStable(ss, func(i, j int) bool {
			return ss[i].score > ss[j].score || ss[i].score == ss[j].score && ss[i].left < ss[j].left
		})
		sort.SliceStable(bs, func(i, j int) bool {
			return bs[i].rank < bs[j].rank || bs[i].rank == bs[j].rank && bs[i].left < bs[j].left
		})
		for i := 0; i < n; i++ {
			if got := sq.pop(); got.score != ss[i].score || got.left != ss[i].left {
				t.Fatalf("spm pop %d: %+v want %+v", i, got, ss[i])
			}
			if got := bq.pop(); got.rank != bs[i].rank || got.left != bs[i].left {
				t.Fatalf("bpe pop %d: %+v want %+v", i, got, bs[i])
			}
		}
		if sq.len() != 0 || bq.len() != 0 {
			t.Fatal("queues not empty")
		}
	}
}
