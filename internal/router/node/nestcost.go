package node

import (
	"fmt"
	"log/slog"
	"math"

	"sluice/internal/engine"
)

// SetNestForward sets role's fixed cost of a forward pass, the nested
// budget's (engine.Config.NestForward): given when above 0, else measured
// on the role's own configuration when measure is set (its model,
// threads, chunk and KV type; engine.MeasureForwardCost), else left to
// the engine's default (a quarter chunk: tests, deterministic). What it
// picked is logged: a budget that lets few light prompts in, or too
// many, starts here.
func SetNestForward(log *slog.Logger, role string, ec *engine.Config, given int, measure bool) error {
	switch {
	case given > 0:
		ec.NestForward = given
		if log != nil {
			log.Info("nested budget: a forward pass's fixed cost, as given", "role", role, "tokens", given)
		}
	case measure:
		fc, err := engine.MeasureForwardCost(*ec)
		if err != nil {
			return fmt.Errorf("%s: measuring a forward pass's fixed cost: %w", role, err)
		}
		ec.NestForward = fc.Tokens
		if log != nil {
			fit := fc.Fit
			if math.IsInf(fit, 1) {
				fit = -1 // slog's JSON handler has no +Inf
			}
			log.Info("nested budget: a forward pass's fixed cost, measured", "role", role, "tokens", fc.Tokens,
				"fit", math.Round(fit*100)/100, "one_token_pass", fc.One, "chunk_pass", fc.Chunk,
				"chunk_tokens", fc.ChunkTokens, "threads", max(ec.Threads, 1), "rounds", fc.Rounds)
		}
	}
	return nil
}
