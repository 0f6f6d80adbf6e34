//go:build !linux

package kernels

import "errors"

// setThreadClass: only Linux lowers compute threads.
func setThreadClass(c ThreadClass) error {
	if c == ClassNormal {
		return nil
	}
	return errors.New("not supported on this OS (Linux only)")
}
