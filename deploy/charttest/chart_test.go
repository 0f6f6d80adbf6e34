// Package charttest renders deploy/helm/sluice with Helm's own Go packages
// and decodes every object strictly into k8s.io/api types, then checks
// that the chart and the sluice binary agree: every flag the chart passes
// exists, the probes hit the admin port the binary is told to listen on,
// the Services reach the ports the roles listen on, the discovery names
// are the headless Services, and the secrets are the rendered Secrets.
// It is its own module so that Helm's and Kubernetes' dependencies stay out
// of the main module's build (cd deploy/charttest && go test).
package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const ns = "serving"

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load("../helm/sluice")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func render(c *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "demo", Namespace: ns, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

// strict decodes one manifest into out; unknown fields fail.
func strict(doc []byte, out any) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	return d.Decode(out)
}

func decodeAll(t *testing.T, files map[string]string) objects {
	t.Helper()
	o := objects{map[string]*appsv1.Deployment{}, map[string]*corev1.Service{}, map[string]*corev1.Secret{}, map[string]*policyv1.PodDisruptionBudget{}}
	for name, text := range files {
		for _, doc := range strings.Split(text, "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var err error
			switch head.Kind {
			case "Deployment":
				v := &appsv1.Deployment{}
				err = strict([]byte(doc), v)
				o.deployments[v.Name] = v
			case "Service":
				v := &corev1.Service{}
				err = strict([]byte(doc), v)
				o.services[v.Name] = v
			case "Secret":
				v := &corev1.Secret{}
				err = strict([]byte(doc), v)
				o.secrets[v.Name] = v
			case "PodDisruptionBudget":
				v := &policyv1.PodDisruptionBudget{}
				err = strict([]byte(doc), v)
				o.pdbs[v.Name] = v
			default:
				t.Fatalf("%s: unexpected kind %q", name, head.Kind)
			}
			if err != nil {
				t.Fatalf("%s (%s): %v\n%s", name, head.Kind, err, doc)
			}
		}
	}
	return o
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

var flagRE = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// binaryFlags is the flag names `sluice ROLE --help` lists.
func binaryFlags(t *testing.T, role string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "run", "./cmd/sluice", role, "--help")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sluice %s --help: %v", role, err)
	}
	fs := map[string]bool{}
	for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
		fs[m[1]] = true
	}
	if !fs["listen"] {
		t.Fatalf("no flags parsed from sluice %s --help:\n%s", role, out)
	}
	return fs
}

func args(c corev1.Container) (string, map[string]string) {
	m := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		m[k] = v
	}
	return c.Args[0], m
}

func port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func listenPort(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

var goodValues = map[string]any{
	"secret":  map[string]any{"value": strings.Repeat("s", 32)},
	"apiKeys": map[string]any{"value": "key-a alice\n"},
}

func TestChartAgreesWithTheBinary(t *testing.T) {
	files, err := render(load(t), goodValues)
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, files)
	if len(o.deployments) != 3 || len(o.services) != 3 || len(o.secrets) != 2 || len(o.pdbs) != 3 {
		t.Fatalf("rendered %d deployments, %d services, %d secrets, %d PDBs", len(o.deployments), len(o.services), len(o.secrets), len(o.pdbs))
	}
	roleArgs := map[string]map[string]string{}
	for _, role := range []string{"router", "prefill", "decode"} {
		d := o.deployments["demo-sluice-"+role]
		if d == nil {
			t.Fatalf("no %s Deployment", role)
		}
		ps := d.Spec.Template.Spec
		if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Fatalf("%s: pods may run as root", role)
		}
		if len(ps.Containers) != 1 {
			t.Fatalf("%s: %d containers", role, len(ps.Containers))
		}
		c := ps.Containers[0]
		cmd, a := args(c)
		if cmd != role {
			t.Fatalf("%s Deployment runs sluice %s", role, cmd)
		}
		roleArgs[role] = a
		known := binaryFlags(t, role)
		for f := range a {
			if !known[f] {
				t.Errorf("%s: the chart passes --%s, which sluice %s does not have", role, f, role)
			}
		}
		// Probes on the admin listener the binary is told to open.
		admin := port(t, c, "admin")
		if listenPort(t, a["metrics-listen"]) != fmt.Sprint(admin) {
			t.Errorf("%s: --metrics-listen %s, admin port %d", role, a["metrics-listen"], admin)
		}
		for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/health", c.ReadinessProbe: "/ready"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "admin" {
				t.Errorf("%s: probe for %s is %+v", role, path, probe)
			}
		}
		main := "handoff"
		if role == "router" {
			main = "http"
		}
		if listenPort(t, a["listen"]) != fmt.Sprint(port(t, c, main)) {
			t.Errorf("%s: --listen %s, %s port %d", role, a["listen"], main, port(t, c, main))
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: no resource requests", role)
		}
		// The shared secret comes from a rendered Secret's "secret" key.
		var ref *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == "SLUICE_SECRET" && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil || o.secrets[ref.Name] == nil || o.secrets[ref.Name].StringData[ref.Key] == "" {
			t.Errorf("%s: SLUICE_SECRET is not a rendered Secret's key: %+v", role, ref)
		}
		// The Service reaches the role's main port on its pods.
		svc := o.services["demo-sluice-"+role]
		if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != main {
			t.Fatalf("%s Service: %+v", role, svc)
		}
		for k, v := range svc.Spec.Selector {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("%s Service selects %s=%s, pods carry %q", role, k, v, d.Spec.Template.Labels[k])
			}
		}
		if pdb := o.pdbs["demo-sluice-"+role]; pdb == nil || pdb.Spec.MinAvailable == nil {
			t.Errorf("%s: no PodDisruptionBudget", role)
		}
	}
	// Discovery: the router's --prefill/--decode and the prefill workers'
	// --decode are the headless Services' names and ports, the same
	// strings on both sides (they name the decode worker of a request).
	for flagOf, role := range map[[2]string]string{{"router", "prefill"}: "prefill", {"router", "decode"}: "decode", {"prefill", "decode"}: "decode"} {
		addr := roleArgs[flagOf[0]][flagOf[1]]
		svc := o.services["demo-sluice-"+role]
		want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", svc.Name, ns, svc.Spec.Ports[0].Port)
		if addr != want || svc.Spec.ClusterIP != "None" {
			t.Errorf("%s --%s is %q; the %s Service (clusterIP %q) is %s", flagOf[0], flagOf[1], addr, role, svc.Spec.ClusterIP, want)
		}
	}
	// API keys: the router reads a file from the keys Secret.
	rd := o.deployments["demo-sluice-router"].Spec.Template.Spec
	keysPath := roleArgs["router"]["api-keys"]
	found := false
	for _, m := range rd.Containers[0].VolumeMounts {
		if strings.HasPrefix(keysPath, m.MountPath+"/") {
			for _, v := range rd.Volumes {
				if v.Name == m.Name && v.Secret != nil && o.secrets[v.Secret.SecretName] != nil &&
					o.secrets[v.Secret.SecretName].StringData[strings.TrimPrefix(keysPath, m.MountPath+"/")] != "" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("--api-keys %q is not a file of a rendered Secret", keysPath)
	}
}

// A secret shorter than the binary's minimum (32 bytes) does not render.
func TestChartRefusesAShortSecret(t *testing.T) {
	_, err := render(load(t), map[string]any{"secret": map[string]any{"value": "short"}})
	if err == nil || !strings.Contains(err.Error(), "at least 32 bytes") {
		t.Fatalf("rendered with a 5-byte secret: %v", err)
	}
}
