// Command pause is the pod sandbox ("pause") image of `make test-k8s`:
// the process that holds a pod's namespaces while its containers come and
// go. The usual pause image lives in a registry this harness does not use,
// so it is this: a static binary that sleeps until SIGTERM or SIGINT, and
// exits 0 then. As PID 1 of the pod it gets no default signal handlers,
// hence the explicit ones.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
