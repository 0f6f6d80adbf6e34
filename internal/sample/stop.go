package sample

import "strings"

// StopMatcher finds stop strings in streamed text. Text that might be the
// start of a stop string is held back until the next piece decides it, so a
// client never receives part of a stop string (OpenAI's contract: the stop
// string itself is not returned).
type StopMatcher struct {
	stops   []string
	held    string
	stopped bool
}

// NewStopMatcher matches any of stops; empty strings are ignored.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Push adds generated text and returns what may be sent now. When a stop
// string completes, stopped is true, emit is the text before the earliest
// match, and everything from the match on is dropped; later calls return
// ("", true).
func (m *StopMatcher) Push(text string) (emit string, stopped bool) {
	if m.stopped {
		return "", true
	}
	buf := m.held + text
	first := -1
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		m.stopped = true
		m.held = ""
		return buf[:first], true
	}
	// Hold back the longest suffix of buf that is a proper prefix of a stop
	// string: the next piece may complete it.
	hold := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(buf)); n > hold; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				hold = n
				break
			}
		}
	}
	m.held = buf[len(buf)-hold:]
	return buf[:len(buf)-hold], false
}

// Flush returns the held-back text when generation ends without a match.
func (m *StopMatcher) Flush() string {
	h := m.held
	m.held = ""
	if m.stopped {
		return ""
	}
	return h
}

// Stopped reports whether a stop string has matched.
func (m *StopMatcher) Stopped() bool { return m.stopped }
