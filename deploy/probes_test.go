package deploy

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestChartArgsServeProbes runs the three roles as processes with the
// args the chart renders (loopback ports instead of the pod's, the
// secret file as the init container leaves it, the built-in model), and
// gets each probe's path from the port it names: the probes are checked
// against what the binary really serves, not against its help text.
func TestChartArgsServeProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three sluice processes")
	}
	o := render(t, map[string]any{
		"prefill": map[string]any{"kvMemory": "8MiB", "threads": 1},
		"decode":  map[string]any{"kvMemory": "8MiB", "threads": 1},
	})
	bin := binPathFor(t)
	dir := t.TempDir()
	// The init container's copy: the Secret's value, mode 0600.
	var secret []byte
	for _, s := range o.secrets {
		if v, ok := s.Data["secret"]; ok {
			secret = v
		}
	}
	secretFile := filepath.Join(dir, "handoff")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}

	// Every pod port maps to a free loopback port; a dialled
	// "<service>:port" maps to the target role's --listen.
	newPort := map[string]map[int32]string{}
	for role, d := range o.deployments {
		newPort[role] = map[int32]string{}
		for _, cp := range d.Spec.Template.Spec.Containers[0].Ports {
			newPort[role][cp.ContainerPort] = freeAddr(t)
		}
	}
	svcRole := map[string]string{}
	for _, s := range o.services {
		for role, d := range o.deployments {
			if s.Spec.Selector["app.kubernetes.io/component"] == d.Spec.Template.Labels["app.kubernetes.io/component"] {
				svcRole[s.Name+"."+namespace+".svc.cluster.local"] = role
			}
		}
	}
	argsOf := func(role string) []string {
		var out []string
		for _, a := range o.deployments[role].Spec.Template.Spec.Containers[0].Args {
			name, val, ok := strings.Cut(a, "=")
			if ok {
				switch name {
				case "--listen", "--metrics-listen":
					val = newPort[role][port(t, val)]
				case "--prefill", "--decode":
					host, _, err := net.SplitHostPort(val)
					if err != nil || svcRole[host] == "" {
						t.Fatalf("sluice %s %s: not a Service of the chart", role, a)
					}
					target := svcRole[host]
					val = newPort[target][port(t, val)]
				case "--secret-file":
					val = secretFile
				}
				a = name + "=" + val
			}
			out = append(out, a)
		}
		return out
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}()
	for _, role := range []string{"decode", "prefill", "router"} {
		cmd := exec.CommandContext(ctx, bin, argsOf(role)...)
		cmd.Env = []string{} // no $SLUICE_SECRET: the file must do
		log, err := os.Create(filepath.Join(dir, role+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	for role, d := range o.deployments {
		c := &d.Spec.Template.Spec.Containers[0]
		for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			p := containerPort(t, c, ios(&pr.HTTPGet.Port, pr.HTTPGet.Port.Type == 1))
			url := "http://" + newPort[role][p] + pr.HTTPGet.Path
			if !eventually200(url) {
				b, _ := os.ReadFile(filepath.Join(dir, role+".log"))
				t.Fatalf("sluice %s: GET %s (the %s probe) never answered 200; log:\n%s", role, url, pr.HTTPGet.Path, b)
			}
		}
	}
}

// eventually200 polls url until it answers 200, for up to a minute of
// start-up (model load, peers connecting); the bound is a wait, not a
// timing assertion.
func eventually200(url string) bool {
	cl := &http.Client{Timeout: 2 * time.Second}
	for range 600 {
		if resp, err := cl.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// binPathFor is the sluice binary binaryFlags builds.
func binPathFor(t *testing.T) string {
	t.Helper()
	binaryFlags(t, "router")
	return binPath
}
