package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"sluice/internal/engine"
	"sluice/internal/router"
)

// The incident's first link, at the HTTP layer alone: every engine-side
// safeguard is switched off (admission, count, digest, owner tags, extent,
// scrub), and the router's own admission check (I2) still turns an
// over-capacity prompt into a 400 that names both numbers, before any page
// is reserved, on every transport.
func TestRouterAdmissionAloneStopsOverCapacity(t *testing.T) {
	m := loadStories(t)
	allOff := func(_ string, c *engine.Config) {
		c.Unsafe = engine.Unsafe{NoAdmission: true, NoCountCheck: true, NoDigest: true, NoOwnerCheck: true, NoExtentCheck: true, NoScrub: true}
	}
	for _, mode := range []LocalConfig{{Colocated: true}, {Transport: TransportTCP}} {
		mode.Pools = Pools{Context: 128, PoolTokens: 128}
		mode.Engine = allOff
		s := serve(t, m, mode, nil)
		long := strings.Repeat("Once upon a time there was a dog. ", 20)
		_, err := s.client.Completions.New(context.Background(), openai.CompletionNewParams{
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(long)}, MaxTokens: openai.Int(16)})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != router.CodeContextLength || !strings.Contains(ae.Message, "128") {
			t.Fatalf("over-capacity prompt with engine safeguards off: %v", err)
		}
		for role, p := range s.stack.Pools {
			if st := p.Stats(); st.Free != st.Pages || st.Scrubbed != 0 {
				t.Fatalf("%s pool was touched by a rejected request: %+v", role, st)
			}
		}
	}
}
