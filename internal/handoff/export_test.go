package handoff

// OpenersWaiting is how many calls wait for their first opener (tests).
func OpenersWaiting() int {
	openers.mu.Lock()
	defer openers.mu.Unlock()
	return len(openers.queue)
}
