package engine

// Admission keeps a free-page watermark. Pages are reserved on demand
// (prompt + one page) and sequences grow page by page, so an admission
// that takes the pool's last free pages leaves the running sequences no
// room to grow: the next one to cross a page boundary preempts the
// latest arrival, which then recomputes its whole KV (disaggregated: a
// new prefill and handoff), and the queue fills the freed pages again at
// once. Measured on the soak (`make soak`: 600 requests, pool
// 512 tokens = 32 pages, disaggregated over TCP; preemptions of one run
// each): no watermark 426 and 455; 1 page per holder, at most a quarter
// of the pool 226, at most half 213; 2 pages per holder, at most half
// 106, at most a quarter 128 (the choice: the cap keeps admission going).
//
// The watermark is two pages per sequence holding pages in the pool (each
// can cross its next two page boundaries before anyone is preempted), at
// most a quarter of the pool so that admission is never starved by it.

// watermarkOK reports whether a reservation of need pages may be made
// now: avail is the pool's available pages (free and evictable), total
// its size, holders the sequences holding pages in it. A pool nobody
// holds pages of admits anything that fits (I2 makes every admitted
// request fit an empty pool), so the watermark never turns "not now"
// into "never".
func watermarkOK(avail, need, total, holders int) bool {
	if need > avail {
		return false
	}
	if holders <= 0 || avail >= total {
		return true
	}
	return avail-need >= watermarkPages(total, holders)
}

// watermarkPerHolder is the pages of growth admission leaves per holder.
const watermarkPerHolder = 2

// watermarkPages is the free pages admission leaves: watermarkPerHolder
// per holder, at most a quarter of the pool.
func watermarkPages(total, holders int) int {
	// holders is at most the pool's pages (each holds one), so the
	// product cannot overflow.
	return min(min(max(holders, 0), total)*watermarkPerHolder, total/4)
}
