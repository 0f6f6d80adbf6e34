package kv_test

import (
	"sluice/internal/kv"
	"sluice/internal/model"
)

// The forward pass reads KV only through model.KV; the pool's View is it.
var _ model.KV = (*kv.View)(nil)

// And it serves F16 pages through model.KV16.
var _ model.KV16 = (*kv.View)(nil)
