package engine

// forwardHook runs one forward pass of a test runtime's forwarder: threads
// is the forwarder's thread count, next the wrapped forwarder's Forward.
type forwardHook func(threads int, steps []Step, next func([]Step) []StepResult) []StepResult

// hookForwarder is rt's forwarder of threads with each pass going through
// hook: the test runtimes that record, count, gate or time passes are
// each a hook on the real runtime.
func hookForwarder(rt Runtime, threads int, hook forwardHook) Forwarder {
	return hookedFwd{f: rt.NewForwarder(threads), threads: threads, hook: hook}
}

type hookedFwd struct {
	f       Forwarder
	threads int
	hook    forwardHook
}

func (f hookedFwd) Forward(steps []Step) []StepResult { return f.hook(f.threads, steps, f.f.Forward) }

// Close closes the wrapped forwarder (its thread pool) when it has one.
func (f hookedFwd) Close() {
	if c, ok := f.f.(interface{ Close() }); ok {
		c.Close()
	}
}
