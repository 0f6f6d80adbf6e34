package main

import "time"

// deadAfter is --peer-timeout as tcp.Config.DeadAfter: 0 turns the
// heartbeat off (negative there).
func deadAfter(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// migrationsFlag is --max-migrations as engine.DisaggConfig.MaxMigrations
// (and --max-retries as MaxRetries): 0 turns it off (negative there).
func migrationsFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
