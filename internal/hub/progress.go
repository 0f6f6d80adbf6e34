package hub

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// bar draws a download's progress on one line of a terminal (carriage
// return, redrawn at most 5 times a second), or as a line per 10% when the
// output is a file or a pipe, so a log does not fill with redraws.
type bar struct {
	w           io.Writer
	tty         bool
	name        string
	have, total int64
	start, last time.Time
	startHave   int64
	lastTenth   int64
}

func newBar(w io.Writer, name string, have, total int64) *bar {
	b := &bar{w: w, name: name, have: have, total: total, start: time.Now(), startHave: have, lastTenth: -1}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.tty = true
		}
	}
	if w != nil && have > 0 {
		fmt.Fprintf(w, "resuming %s at %s\n", name, mib(have))
	}
	return b
}

func (b *bar) Write(p []byte) (int, error) {
	b.have += int64(len(p))
	if b.w == nil {
		return len(p), nil
	}
	now := time.Now()
	if b.tty {
		if now.Sub(b.last) >= 200*time.Millisecond {
			b.last = now
			fmt.Fprint(b.w, "\r"+b.line(now))
		}
		return len(p), nil
	}
	if b.total > 0 {
		if t := b.have * 10 / b.total; t > b.lastTenth {
			b.lastTenth = t
			fmt.Fprintln(b.w, b.line(now))
		}
	}
	return len(p), nil
}

func (b *bar) line(now time.Time) string {
	rate := ""
	if s := now.Sub(b.start).Seconds(); s > 0.2 {
		rate = fmt.Sprintf(" %s/s", mib(int64(float64(b.have-b.startHave)/s)))
	}
	if b.total <= 0 {
		return fmt.Sprintf("downloading %s %s%s", b.name, mib(b.have), rate)
	}
	pct := float64(b.have) * 100 / float64(b.total)
	const width = 30
	fill := int(pct * width / 100)
	fill = min(max(fill, 0), width)
	return fmt.Sprintf("downloading %s [%s%s] %5.1f%% %s / %s%s", b.name, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct, mib(b.have), mib(b.total), rate)
}

func (b *bar) done() {
	if b.w != nil && b.tty {
		fmt.Fprintln(b.w, "\r"+b.line(time.Now()))
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
