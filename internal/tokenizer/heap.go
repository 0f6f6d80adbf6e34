package tokenizer

// The merge work queues are binary min-heaps written out per element type:
// a generic heap calls its comparison through a function value, which made
// long words (where the queue is most of the work) about twice as slow.
// Keep the two copies identical apart from the element type.

type spmQueue struct{ items []spmBigram }

func (h *spmQueue) len() int { return len(h.items) }

func (h *spmQueue) push(x spmBigram) {
	h.items = append(h.items, x)
	it := h.items
	i := len(it) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !it[i].before(it[p]) {
			break
		}
		it[i], it[p] = it[p], it[i]
		i = p
	}
}

func (h *spmQueue) pop() spmBigram {
	it := h.items
	top := it[0]
	last := len(it) - 1
	it[0] = it[last]
	it = it[:last]
	h.items = it
	i := 0
	for {
		l := 2*i + 1
		if l >= last {
			break
		}
		m := l
		if r := l + 1; r < last && it[r].before(it[l]) {
			m = r
		}
		if !it[m].before(it[i]) {
			break
		}
		it[i], it[m] = it[m], it[i]
		i = m
	}
	return top
}

type bpeQueue struct{ items []bpeBigram }

func (h *bpeQueue) len() int { return len(h.items) }

func (h *bpeQueue) push(x bpeBigram) {
	h.items = append(h.items, x)
	it := h.items
	i := len(it) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !it[i].before(it[p]) {
			break
		}
		it[i], it[p] = it[p], it[i]
		i = p
	}
}

func (h *bpeQueue) pop() bpeBigram {
	it := h.items
	top := it[0]
	last := len(it) - 1
	it[0] = it[last]
	it = it[:last]
	h.items = it
	i := 0
	for {
		l := 2*i + 1
		if l >= last {
			break
		}
		m := l
		if r := l + 1; r < last && it[r].before(it[l]) {
			m = r
		}
		if !it[m].before(it[i]) {
			break
		}
		it[i], it[m] = it[m], it[i]
		i = m
	}
	return top
}
