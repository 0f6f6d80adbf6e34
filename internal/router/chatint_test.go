package router

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// Integers are Python's, exact at any size, but a tenant's integer (up
// to a request body of digits) and what a template computes from it are
// bounded by Python's own 4,300 digits (json.loads refuses a longer one):
// refused before it is parsed or computed, whatever the operation. It
// still prints as its digits.
func TestChatTemplateBigIntBounded(t *testing.T) {
	long := pyBigInt("1" + strings.Repeat("0", maxIntDigits)) // 4,301 digits
	for src, want := range map[string]string{
		"{{ b }}":     string(long),
		"{{ b > 5 }}": "",
		"{{ b + 1 }}": "",
		"{{ b * 1 }}": "",
		"{{ -b }}":    "",
		"{{ b|int }}": "",
	} {
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := ct.RenderWith(nil, RenderOptions{Kwargs: map[string]any{"b": long}})
		switch {
		case want != "" && (err != nil || out != want):
			t.Errorf("%s: %.40q %v", src, out, err)
		case want == "" && (err == nil || !strings.Contains(err.Error(), "4300 digits")):
			t.Errorf("%s: %.40q %v, want refused (4300 digits)", src, out, err)
		}
	}
	// A power is bounded before it is computed: 2 ** 200000000 would
	// be 25 MB of digits' bits.
	ct, err := NewChatTemplate("{{ 2 ** 200000000 }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := ct.Render(nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "4300 digits") {
		t.Errorf("2 ** 200000000: %.40q %v, want refused", out, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("2 ** 200000000 refused after allocating %d MiB", got>>20)
	}
}

// Converting a long integer's digits (parsing it for an operation,
// writing a result) is about quadratic: 140 us at 4,300 digits, so a
// loop doing arithmetic on a tenant's longest integer once a step took
// 140 s of CPU within the loop steps' bound. The digits are charged to
// the loop steps (16 to a step).
func TestChatTemplateBigIntDigitsCharged(t *testing.T) {
	b := pyBigInt("9" + strings.Repeat("8", maxIntDigits-1))
	for _, op := range []string{"b - i", "b > i", "b // 7", "b|int", "b|abs"} {
		ct, err := NewChatTemplate("{% for i in range(n) %}{% set _ = "+op+" %}{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 50_000 // ~270 steps a parse, as many a result
		if out, err := ct.RenderWith(nil, RenderOptions{Kwargs: map[string]any{"b": b, "n": 40}}); err != nil || out != "x" {
			t.Errorf("%s 40 times: %q %v", op, out, err)
		}
		if out, err := ct.RenderWith(nil, RenderOptions{Kwargs: map[string]any{"b": b, "n": 400}}); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s 400 times: %q %v, want ErrTemplateTooMuchWork", op, out, err)
		}
	}
}
