package router

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// A printed value is charged what is printed: a string's repr can be
// four times its bytes (\x01 for a control byte), more than the sizer's
// bound charged before printing, and a tenant's message of control bytes
// printed inside a list made four times the text its budget paid for
// (and the printer built it before anyone looked). Printing stops once
// it passes what the rendering has left, and what it printed is charged.
func TestChatTemplatePrintCharged(t *testing.T) {
	const budget = 1 << 20
	msg := strings.Repeat("\x01", 64<<10) // 64 KiB; its repr is 256 KiB
	for _, c := range []struct {
		src       string
		fits, not int // prints of 256 KiB that fit, and a count refused that fit under the sizer's charge
	}{
		{"{% set l = [messages[0].content] %}{% for i in range(n) %}{{ l }}{% endfor %}x", 3, 6},
		{"{% set l = [messages[0].content] %}{% for i in range(n) %}{% set _ = 'a' ~ l %}{% endfor %}x", 3, 6},
		// |string also charges the string it makes (budgetFilter).
		{"{% set l = [messages[0].content] %}{% for i in range(n) %}{% set _ = l|string %}{% endfor %}x", 1, 2},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxBuilt = budget
		msgs := []ChatMessage{{Role: "user", Content: msg}}
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": c.fits}}); err != nil || !strings.HasSuffix(out, "x") {
			t.Fatalf("%s, %d prints: %.40q %v", c.src, c.fits, out, err)
		}
		n := c.not
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": n}}); !errors.Is(err, ErrRenderTooLarge) {
			t.Errorf("%s, %d prints: %.40q %v, want ErrRenderTooLarge", c.src, n, out, err)
		}
	}
}

// One print of a value whose text is far larger than the rendering has
// left stops there: the printer does not build the whole text first (it
// did: 16 MiB of text for an 8 MiB budget, 100 MiB allocated on the way,
// and the rendering passed).
func TestChatTemplatePrintStopsAtBudget(t *testing.T) {
	const budget = 8 << 20
	msgs := []ChatMessage{{Role: "user", Content: strings.Repeat("\x01", 4<<20)}} // repr: 16 MiB
	alloc := func(src string) (uint64, error) {
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxBuilt = budget
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = ct.RenderWith(msgs, RenderOptions{})
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, err
	}
	base, err := alloc("{{ messages[0].content|length }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := alloc("{{ [messages[0].content] }}")
	if !errors.Is(err, ErrRenderTooLarge) {
		t.Fatalf("%v, want ErrRenderTooLarge", err)
	}
	// The budget's text and a builder's growth to it (about 3x).
	if got-base > 4*budget {
		t.Errorf("refused after allocating %d MiB more than a rendering that prints nothing", (got-base)>>20)
	}
}

// A format's list argument is sized before it is printed: a list that
// holds itself twice at 40 levels (2^40 leaves, a few hundred bytes of
// values) has a text no budget holds, and printing it up to the budget
// took 6.7 s and the whole budget of memory.
func TestChatTemplateFormatArgSizedFirst(t *testing.T) {
	for _, f := range []string{"'{}'.format(ns.l)", "'%s'|format(ns.l)"} {
		ct, err := NewChatTemplate("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ "+f+" }}", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxBuilt = 8 << 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := ct.Render(nil)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrRenderTooLarge) {
			t.Fatalf("%s: %.40q %v, want ErrRenderTooLarge", f, out, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
			t.Errorf("%s: refused after allocating %d MiB", f, got>>20)
		}
	}
}
