//go:build !linux

package testnet

import (
	"errors"
	"net/netip"
	"os"
)

// Available says why namespaces cannot be made: they are Linux's.
func Available() string { return "network namespaces and TUN devices are Linux only" }

type nsThread struct{}

func newNSThread() (*nsThread, error)     { return nil, errors.New(Available()) }
func (t *nsThread) do(func() error) error { return errors.New(Available()) }
func (t *nsThread) close()                {}

func setupNamespace(netip.Addr) (*os.File, error) { return nil, errors.New(Available()) }
