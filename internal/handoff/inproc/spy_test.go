package inproc_test

import (
	"context"

	"sluice/internal/handoff"
)

type spy struct {
	handoff.Decode
	f func([]handoff.PageWrite)
}

func writeSpy(f func([]handoff.PageWrite)) handoff.Decode { return spy{f: f} }

func (s spy) Write(ctx context.Context, ws []handoff.PageWrite) error { s.f(ws); return nil }
