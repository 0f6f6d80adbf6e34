package testnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Available says why namespaces with TUN devices cannot be made here ("" when
// they can): it tries, in a throw-away namespace.
func Available() string {
	if os.Geteuid() != 0 {
		return "not root: making network namespaces and TUN devices needs CAP_NET_ADMIN"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "no /dev/net/tun: " + err.Error()
	}
	ns, err := newNSThread()
	if err != nil {
		return err.Error()
	}
	defer ns.close()
	if err := ns.do(func() error {
		f, err := setupNamespace(netip.MustParseAddr("10.77.0.1"))
		if err == nil {
			f.Close()
		}
		return err
	}); err != nil {
		return err.Error()
	}
	return ""
}

// nsThread is a goroutine locked to an OS thread that left the process's
// network namespace for a new one; work that must happen inside the
// namespace (making its devices, forking a process into it, opening a
// socket in it) runs there. The thread is never unlocked, so the Go
// runtime ends it with the goroutine instead of reusing it elsewhere.
type nsThread struct {
	work chan func()
}

func newNSThread() (*nsThread, error) {
	t := &nsThread{work: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return // the thread, locked, ends with the goroutine
		}
		errc <- nil
		for f := range t.work {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *nsThread) do(f func() error) error {
	errc := make(chan error, 1)
	t.work <- func() { errc <- f() }
	return <-errc
}

func (t *nsThread) close() { close(t.work) }

// setupNamespace, on a thread inside the namespace, brings loopback up
// and makes the TUN device "tn0" with addr/24, up.
func setupNamespace(addr netip.Addr) (*os.File, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(s)
	if err := ifUp(s, "lo"); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq("tn0")
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", err)
	}
	a4 := addr.As4()
	for _, set := range []struct {
		req uint
		v   []byte
	}{{unix.SIOCSIFADDR, a4[:]}, {unix.SIOCSIFNETMASK, []byte{255, 255, 255, 0}}} {
		ifr, _ := unix.NewIfreq("tn0")
		if err := ifr.SetInet4Addr(set.v); err != nil {
			unix.Close(fd)
			return nil, err
		}
		if err := unix.IoctlIfreq(s, set.req, ifr); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("setting the address of tn0: %w", err)
		}
	}
	if err := ifUp(s, "tn0"); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tn0")
	if f == nil {
		return nil, errors.New("tn0: bad file descriptor")
	}
	return f, nil
}

func ifUp(s int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}
