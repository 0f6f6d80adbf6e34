package handoff

import "context"

// The tenant a call is made for, carried in its context to the transport
// that orders calls: the TCP client hands a connection's call slots out
// fairly across tenants, in proportion to their weights (tcp/slots.go),
// and a page write or a commit names only its handoff. Nothing of it
// goes on the wire: it orders this process's own calls, and a peer learns
// a tenant only from the messages that carry one (Reserve,
// PrefillRequest), as before.

type callerKey struct{}

type caller struct {
	tenant string
	weight int
}

// WithCaller returns ctx naming tenant, of weight weight (the key file's
// weight=; 0 counts as 1), as the one its calls are made for.
func WithCaller(ctx context.Context, tenant string, weight int) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{tenant, weight})
}

// CallerOf is the tenant and weight ctx names (WithCaller); "" and 1 when
// it names none: such calls share the slots as one tenant of their own.
func CallerOf(ctx context.Context) (tenant string, weight int) {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c.tenant, min(max(c.weight, 1), MaxWeight)
}
