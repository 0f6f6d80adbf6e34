package sched

// A colocated step steps aside for whole prompts.
//
// In one process that computes prompts and decodes, a light tenant's
// short prompt that arrives between two steps (or while a step that
// cannot pause runs) joins the next step beside a heavy tenant's prompt
// chunk: its first token comes only when that whole shared step ends,
// the heavy chunk's tokens included, where alone it would come after a
// step of its own few tokens. A nested step at a pause point serves the
// prompts that arrive during a step; this serves those that arrive at
// its boundary. The step aside runs the whole prompts (first chunk and
// last: the prompt's first token is drawn after it) with the decode
// tokens, and the other prompt chunks wait one step.
//
// Bounds: a step aside costs one forward pass, like a nested one, so it
// follows a step that took no extra pass (neither aside nor nested) and
// never pauses itself: every step that carries the other chunks is
// followed by at most one extra pass, so a burst of tiny prompts costs
// the heavy tenant at most one short pass per step of its own, never a
// pass per prompt. One tenant never steps aside for itself (its chunks
// in its own order, its throughput as before): only when a whole prompt
// and another tenant's partial chunk are both in the plan. The pass's
// fixed cost is charged to the whole prompts' tenants, as for a nested
// step.

// Planned is a prompt chunk the step's plan (Plan) took.
type Planned struct {
	Tenant string
	// Whole: the chunk is the prompt's first and its last: its first
	// token is drawn after this step.
	Whole bool
}

// Aside reports whether the step runs aside: only the Whole chunks of
// planned (with the decode tokens), the others waiting for the next
// step. extra is whether the previous step took an extra pass (it was
// aside, or a nested step ran inside it). It is true only when a whole
// prompt and a partial chunk of another tenant are both planned.
func Aside(planned []Planned, extra bool) bool {
	if extra {
		return false
	}
	for _, w := range planned {
		if !w.Whole {
			continue
		}
		for _, p := range planned {
			if !p.Whole && p.Tenant != w.Tenant {
				return true
			}
		}
	}
	return false
}
