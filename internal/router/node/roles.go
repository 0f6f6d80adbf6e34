package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// SecretEnv is the environment variable that may carry the workers' shared
// secret (I12) when no secret file is given.
const SecretEnv = "SLUICE_SECRET"

// LoadSecret reads the shared secret from file (which must not be readable
// by others) or, without a file, from $SLUICE_SECRET. It is never taken from
// the command line: argv is visible to every local user.
func LoadSecret(file string) ([]byte, error) {
	if file != "" {
		return tcp.LoadSecret(file)
	}
	s := os.Getenv(SecretEnv)
	if s == "" {
		return nil, fmt.Errorf("no shared secret: give --secret-file FILE (mode 600) or set $%s; the roles authenticate each other with it (I12)", SecretEnv)
	}
	if len(s) < tcp.MinSecret {
		return nil, fmt.Errorf("$%s holds %d bytes, need at least %d", SecretEnv, len(s), tcp.MinSecret)
	}
	return []byte(s), nil
}

// ProbeDecodeContext asks a decode worker, through its ordinary admission
// path, whether it admits a request filling ctxLen tokens: it reserves
// ctxLen-1 prompt tokens plus 1 generated token and aborts at once. A router
// in its own process has no pool of its own; this is how it refuses to
// advertise a context the decode role would reject (I2). fp is the
// router's model fingerprint: a decode worker of another model refuses the
// probe (I13).
func ProbeDecodeContext(ctx context.Context, d handoff.Decode, ctxLen int, fp model.Fingerprint) error {
	if ctxLen < 2 {
		return nil
	}
	var id kv.ID
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	_, err := d.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "sluice-router-preflight", PromptTokens: ctxLen - 1, MaxTokens: 1, Model: fp})
	if aerr := d.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "router start-up context probe"}); err == nil && aerr != nil {
		return fmt.Errorf("aborting the probe reservation: %w", aerr)
	}
	if errors.Is(err, handoff.ErrNoRoom) {
		// Admitted by length and the pool can hold it, only not now (other
		// routers' requests): the context fits.
		return nil
	}
	return err
}

// PrefillContext is a prefill worker's context from its load report (0
// when it reports none): the longest prompt it prefills. A router vets
// every prefill worker with it as it vets decode workers (I2).
func PrefillContext(ctx context.Context, load func(context.Context) (*handoff.Load, error)) (int, error) {
	if load == nil {
		return 0, nil
	}
	l, err := load(ctx)
	if err != nil {
		return 0, err
	}
	return l.Context, nil
}

// ProbePrefillContext refuses a prefill worker whose context is below the
// router's ctxLen: a prompt the router admits must be one every prefill
// worker prefills (I2). The error names the prefill worker's refusal.
func ProbePrefillContext(ctx context.Context, load func(context.Context) (*handoff.Load, error), ctxLen int) error {
	n, err := PrefillContext(ctx, load)
	if err != nil {
		return err
	}
	if n > 0 && n < ctxLen {
		return handoff.ErrPrefillRefused.With("the prefill worker admits a context of %d tokens, below the router's %d", n, ctxLen)
	}
	return nil
}
