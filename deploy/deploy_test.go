package deploy

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"sluice/internal/router"
)

const (
	chartDir  = "helm/sluice"
	release   = "rel"
	namespace = "llm"
)

// objects is one rendering of the chart, decoded.
type objects struct {
	deployments map[string]*appsv1.Deployment // by role (container name)
	services    []*corev1.Service
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
	netpols     []*networkingv1.NetworkPolicy
}

// strict decodes YAML into the registered k8s.io/api types with
// apimachinery's strict mode: an unknown or duplicated field is an error,
// as `kubectl apply --validate=strict` makes it.
var strict = serjson.NewSerializerWithOptions(serjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	serjson.SerializerOptions{Yaml: true, Strict: true})

// render renders the chart with vals (the user's values, over values.yaml)
// as a fresh install, and decodes every object.
func render(t *testing.T, vals map[string]any) objects {
	t.Helper()
	docs, err := renderDocs(vals)
	if err != nil {
		t.Fatal(err)
	}
	o := objects{deployments: map[string]*appsv1.Deployment{}, secrets: map[string]*corev1.Secret{}}
	for name, doc := range docs {
		obj, _, err := strict.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: strict decoding into k8s.io/api types: %v\n%s", name, err, doc)
		}
		switch x := obj.(type) {
		case *appsv1.Deployment:
			if len(x.Spec.Template.Spec.Containers) != 1 {
				t.Fatalf("deployment %s: %d containers, want 1", x.Name, len(x.Spec.Template.Spec.Containers))
			}
			role := x.Spec.Template.Spec.Containers[0].Name
			if o.deployments[role] != nil {
				t.Fatalf("two deployments of role %s", role)
			}
			o.deployments[role] = x
		case *corev1.Service:
			o.services = append(o.services, x)
		case *corev1.Secret:
			o.secrets[x.Name] = x
		case *policyv1.PodDisruptionBudget:
			o.pdbs = append(o.pdbs, x)
		case *networkingv1.NetworkPolicy:
			o.netpols = append(o.netpols, x)
		default:
			t.Fatalf("%s: unexpected kind %T", name, obj)
		}
		meta := obj.(metav1.Object)
		if meta.GetNamespace() != namespace {
			t.Errorf("%s %s: namespace %q, want the release's %q", name, meta.GetName(), meta.GetNamespace(), namespace)
		}
		if errs := validation.IsDNS1123Subdomain(meta.GetName()); len(errs) > 0 {
			t.Errorf("%s: name %q: %v", name, meta.GetName(), errs)
		}
	}
	for _, role := range []string{"router", "prefill", "decode"} {
		if o.deployments[role] == nil {
			t.Fatalf("no deployment of role %s", role)
		}
	}
	return o
}

// renderDocs renders the chart and splits it into its YAML documents, by
// "template#index"; NOTES.txt and empty documents are left out.
func renderDocs(vals map[string]any) (map[string]string, error) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	for name, text := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
			if onlyComments(doc) {
				continue
			}
			docs[fmt.Sprintf("%s#%d", name, i)] = doc
		}
	}
	return docs, nil
}

func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// flagInfo is one flag of a sluice command, as its --help prints it.
type flagInfo struct {
	typ   string // "" for a boolean flag, else the type name (string, int, duration)
	usage string
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
	helpMu  sync.Mutex
	helps   = map[string]map[string]flagInfo{}
)

// binaryFlags returns the flags `sluice <role> --help` lists, from the
// binary built from this tree: the chart is checked against the real
// flag sets, not a copy of their names.
func binaryFlags(t *testing.T, role string) map[string]flagInfo {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-deploy-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "sluice")
		if out, err := exec.Command("go", "build", "-o", binPath, "sluice/cmd/sluice").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helps[role]; ok {
		return f
	}
	out, err := exec.Command(binPath, role, "--help").Output()
	if err != nil {
		t.Fatalf("sluice %s --help: %v", role, err)
	}
	flags := parseHelp(string(out))
	if len(flags) == 0 {
		t.Fatalf("sluice %s --help lists no flags:\n%s", role, out)
	}
	helps[role] = flags
	return flags
}

// parseHelp reads flag.PrintDefaults output: "  -name type" lines, each
// followed by its indented usage.
func parseHelp(out string) map[string]flagInfo {
	flags := map[string]flagInfo{}
	head := regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: (\S+))?$`)
	var cur string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if m := head.FindStringSubmatch(l); m != nil {
			cur = m[1]
			flags[cur] = flagInfo{typ: m[2]}
			continue
		}
		if cur != "" && strings.HasPrefix(l, "    \t") {
			f := flags[cur]
			f.usage += strings.TrimPrefix(l, "    \t") + " "
			flags[cur] = f
		}
	}
	return flags
}

// parseArgs parses a container's args (role, then flags) with a flag set
// built from the role's --help: an unknown flag, a value of the wrong type
// or a positional argument fails. It returns the flags' values as given.
func parseArgs(t *testing.T, args []string) (role string, given map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("container has no args: the role must come first")
	}
	role = args[0]
	known := binaryFlags(t, role)
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	for name, f := range known {
		switch f.typ {
		case "":
			fs.Bool(name, false, "")
		case "int":
			fs.Int(name, 0, "")
		case "duration":
			fs.Duration(name, 0, "")
		default:
			fs.String(name, "", "")
		}
	}
	for _, a := range args[1:] {
		// One "--name=value" token per flag: a value never hides in the
		// next token, so each arg reads on its own.
		if !strings.HasPrefix(a, "--") || (!strings.Contains(a, "=") && known[strings.TrimPrefix(a, "--")].typ != "") {
			t.Errorf("sluice %s: arg %q is not --name=value", role, a)
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("sluice %s does not accept %q: %v", role, args[1:], err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("sluice %s: positional args %q", role, fs.Args())
	}
	given = map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	return role, given
}

// port returns the port of a host:port listen address.
func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n <= 0 {
		t.Fatalf("address %q: no port", addr)
	}
	return int32(n)
}

// containerPort resolves a probe's or Service's port (a number or a
// container port's name).
func containerPort(t *testing.T, c *corev1.Container, p intOrString) int32 {
	t.Helper()
	if p.name == "" {
		return p.num
	}
	for _, cp := range c.Ports {
		if cp.Name == p.name {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.name)
	return 0
}

type intOrString struct {
	num  int32
	name string
}

func ios(v interface {
	String() string
	IntValue() int
}, isStr bool) intOrString {
	if isStr {
		return intOrString{name: v.String()}
	}
	return intOrString{num: int32(v.IntValue())}
}

// check runs every cross-object check on one rendering; want describes
// what the values asked for.
type want struct {
	multiTenant  bool
	tenants      map[string]string // key -> tenant, when multiTenant with chart-made keys
	handoffName  string            // the handoff Secret's name
	renderedKeys bool              // the chart renders the handoff Secret
	modelFile    string            // --model, "" for none
	modelVolume  string            // "pvc" or "hostPath" when modelFile != ""
	pdbs         int
	replicas     map[string]int32
}

func check(t *testing.T, o objects, w want) {
	t.Helper()
	listen := map[string]int32{}
	flags := map[string]map[string]string{}
	for role, d := range o.deployments {
		checkDeployment(t, role, d, w, flags, listen)
	}

	checkNetworkPolicies(t, o)

	// Services: every selector picks exactly one role's pods, targetPorts
	// resolve to that role's container ports.
	headless := map[string]*corev1.Service{}
	for _, s := range o.services {
		if errs := validation.IsDNS1035Label(s.Name); len(errs) > 0 {
			t.Errorf("service %s: %v", s.Name, errs)
		}
		var matched []string
		for role, d := range o.deployments {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, role)
			}
		}
		if len(s.Spec.Selector) == 0 || len(matched) != 1 {
			t.Fatalf("service %s selects the pods of %v, want exactly one role", s.Name, matched)
		}
		role := matched[0]
		c := &o.deployments[role].Spec.Template.Spec.Containers[0]
		for _, sp := range s.Spec.Ports {
			tp := containerPort(t, c, ios(&sp.TargetPort, sp.TargetPort.Type == 1))
			if tp != listen[role] {
				t.Errorf("service %s port %d -> container port %d, but sluice %s --listen is on %d", s.Name, sp.Port, tp, role, listen[role])
			}
		}
		switch role {
		case "router":
			if s.Spec.ClusterIP == corev1.ClusterIPNone {
				t.Errorf("router service %s is headless; it should balance over the routers", s.Name)
			}
		default:
			if s.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("%s service %s is not headless: DNS would give the virtual IP, not one record per pod", role, s.Name)
			}
			if headless[role] != nil {
				t.Errorf("two services for %s", role)
			}
			headless[role] = s
		}
	}

	// Discovery: the router dials prefill and decode, prefill dials
	// decode, each at its headless Service's DNS name and the Service's
	// port, which is the worker's --listen port.
	dials := []struct{ from, flag, to string }{
		{"router", "prefill", "prefill"}, {"router", "decode", "decode"}, {"prefill", "decode", "decode"},
	}
	for _, dl := range dials {
		addr := flags[dl.from][dl.flag]
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("sluice %s --%s=%q: %v", dl.from, dl.flag, addr, err)
		}
		s := headless[dl.to]
		if s == nil {
			t.Fatalf("no headless service for %s", dl.to)
		}
		if wantHost := s.Name + "." + namespace + ".svc.cluster.local"; host != wantHost {
			t.Errorf("sluice %s --%s host %q, want the %s headless service's name %q", dl.from, dl.flag, host, dl.to, wantHost)
		}
		if len(s.Spec.Ports) != 1 || strconv.Itoa(int(s.Spec.Ports[0].Port)) != p || s.Spec.Ports[0].Port != listen[dl.to] {
			t.Errorf("sluice %s --%s port %s, service %s ports %v, sluice %s --listen port %d: must all agree", dl.from, dl.flag, p, s.Name, s.Spec.Ports, dl.to, listen[dl.to])
		}
	}

	// PDBs: each selects exactly one role's pods, and every role has one
	// when asked.
	if len(o.pdbs) != w.pdbs {
		t.Errorf("%d PodDisruptionBudgets, want %d", len(o.pdbs), w.pdbs)
	}
	covered := map[string]bool{}
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Fatalf("pdb %s: selector %v: %v", p.Name, p.Spec.Selector, err)
		}
		var matched []string
		for role, d := range o.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, role)
			}
		}
		if len(matched) != 1 {
			t.Fatalf("pdb %s selects the pods of %v, want exactly one role", p.Name, matched)
		}
		if covered[matched[0]] {
			t.Errorf("two PDBs for %s", matched[0])
		}
		covered[matched[0]] = true
		if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
			t.Errorf("pdb %s sets neither maxUnavailable nor minAvailable", p.Name)
		}
	}

	// Multi-tenancy: --api-keys iff keys were given, and the file the
	// chart renders parses with the router's own parser into the tenants.
	_, hasKeys := flags["router"]["api-keys"]
	if hasKeys != w.multiTenant {
		t.Errorf("router --api-keys given: %v, want %v", hasKeys, w.multiTenant)
	}
	if w.tenants != nil {
		var keysSecret *corev1.Secret
		for _, s := range o.secrets {
			if _, ok := s.StringData["api-keys"]; ok {
				keysSecret = s
			}
		}
		if keysSecret == nil {
			t.Fatal("no rendered API keys Secret")
		}
		k, err := router.ParseKeys(strings.NewReader(keysSecret.StringData["api-keys"]))
		if err != nil {
			t.Fatalf("the rendered API keys file does not parse with the router's parser: %v", err)
		}
		for key, tenant := range w.tenants {
			if got, ok := k.Lookup(key); !ok || got != tenant {
				t.Errorf("API key %q -> tenant %q, %v; want %q", key, got, ok, tenant)
			}
		}
	}
	_, rendered := o.secrets[w.handoffName]
	if rendered != w.renderedKeys {
		t.Errorf("handoff Secret %s rendered: %v, want %v", w.handoffName, rendered, w.renderedKeys)
	}
}

func checkDeployment(t *testing.T, role string, d *appsv1.Deployment, w want, flags map[string]map[string]string, listen map[string]int32) {
	t.Helper()
	ps := &d.Spec.Template.Spec
	c := &ps.Containers[0]
	got, given := parseArgs(t, c.Args)
	if got != role {
		t.Fatalf("deployment %s: container %s runs `sluice %s`", d.Name, role, got)
	}
	flags[role] = given
	known := binaryFlags(t, role)

	if d.Spec.Selector == nil {
		t.Fatalf("deployment %s has no selector", d.Name)
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Fatalf("deployment %s: selector %v does not select its own pods %v (%v)", d.Name, d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	if wr, ok := w.replicas[role]; ok && (d.Spec.Replicas == nil || *d.Spec.Replicas != wr) {
		t.Errorf("deployment %s: replicas %v, want %d", d.Name, d.Spec.Replicas, wr)
	}

	// The API / handoff port is --listen, bound on every interface.
	l, ok := given["listen"]
	if !ok || !strings.HasPrefix(l, "0.0.0.0:") {
		t.Fatalf("sluice %s --listen=%q: must listen on 0.0.0.0 in a pod", role, l)
	}
	listen[role] = port(t, l)
	main := "handoff"
	if role == "router" {
		main = "http"
	}
	if p := containerPort(t, c, intOrString{name: main}); p != listen[role] {
		t.Errorf("sluice %s: container port %s is %d, --listen is on %d", role, main, p, listen[role])
	}
	for _, cp := range c.Ports {
		if errs := validation.IsValidPortName(cp.Name); len(errs) > 0 {
			t.Errorf("container %s port %q: %v", role, cp.Name, errs)
		}
	}

	// Probes: on the admin listener (--metrics-listen), whose usage in
	// the role's --help says it serves the probed path.
	ml, ok := given["metrics-listen"]
	if !ok {
		t.Fatalf("sluice %s has no --metrics-listen: no admin listener to probe", role)
	}
	admin := port(t, ml)
	if admin == listen[role] {
		t.Errorf("sluice %s: the admin listener shares --listen's port", role)
	}
	probes := []struct {
		kind string
		p    *corev1.Probe
		path string
	}{{"startup", c.StartupProbe, "/health"}, {"liveness", c.LivenessProbe, "/health"}, {"readiness", c.ReadinessProbe, "/ready"}}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("sluice %s: no HTTP %s probe", role, pr.kind)
			continue
		}
		hg := pr.p.HTTPGet
		if hg.Path != pr.path {
			t.Errorf("sluice %s %s probe on %q, want %q", role, pr.kind, hg.Path, pr.path)
		}
		if p := containerPort(t, c, ios(&hg.Port, hg.Port.Type == 1)); p != admin {
			t.Errorf("sluice %s %s probe on port %d, the admin listener (--metrics-listen) is on %d", role, pr.kind, p, admin)
		}
		if !strings.Contains(known["metrics-listen"].usage, pr.path) {
			t.Errorf("sluice %s --help does not say --metrics-listen serves %s: %q", role, pr.path, known["metrics-listen"].usage)
		}
	}

	// Secrets: the handoff secret is a file (never an arg or env), the
	// copy the init container makes with umask 077 into an emptyDir, from
	// the Secret's key.
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("sluice %s: secret %s in env %s; secrets are files", role, e.ValueFrom.SecretKeyRef.Name, e.Name)
		}
	}
	sf := given["secret-file"]
	vol := volumeAt(t, ps, c, sf)
	if vol.EmptyDir == nil || vol.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("sluice %s --secret-file %s is on volume %s, want an in-memory emptyDir", role, sf, vol.Name)
	}
	if len(ps.InitContainers) != 1 {
		t.Fatalf("%s: %d init containers, want the one that copies the secret", role, len(ps.InitContainers))
	}
	ic := &ps.InitContainers[0]
	cmd := strings.Join(ic.Command, " ")
	if !strings.Contains(cmd, "umask 077") || !strings.Contains(cmd, "> "+sf) {
		t.Errorf("%s init container %q does not write %s with umask 077", role, cmd, sf)
	}
	if v := volumeAt(t, ps, ic, sf); v.Name != vol.Name {
		t.Errorf("%s: init writes %s on volume %s, sluice reads it on %s", role, sf, v.Name, vol.Name)
	}
	src := regexp.MustCompile(`cat (\S+)`).FindStringSubmatch(cmd)
	if src == nil {
		t.Fatalf("%s init container %q reads no file", role, cmd)
	}
	sv := volumeAt(t, ps, ic, src[1])
	if sv.Secret == nil || sv.Secret.SecretName != w.handoffName {
		t.Fatalf("%s: init reads %s from volume %s, want the handoff Secret %s", role, src[1], sv.Name, w.handoffName)
	}
	checkSecretItem(t, role, sv, src[1], ps, ic)

	if ak, ok := given["api-keys"]; ok {
		av := volumeAt(t, ps, c, ak)
		if av.Secret == nil {
			t.Fatalf("sluice %s --api-keys %s is not on a Secret volume", role, ak)
		}
		checkSecretItem(t, role, av, ak, ps, c)
	}

	// The model is on a read-only volume of the asked kind.
	if mf := given["model"]; mf != w.modelFile {
		t.Errorf("sluice %s --model=%q, want %q", role, mf, w.modelFile)
	} else if mf != "" {
		mv := volumeAt(t, ps, c, mf)
		switch w.modelVolume {
		case "pvc":
			if mv.PersistentVolumeClaim == nil || !mv.PersistentVolumeClaim.ReadOnly {
				t.Errorf("sluice %s --model on volume %s, want a read-only PVC", role, mv.Name)
			}
		case "hostPath":
			if mv.HostPath == nil {
				t.Errorf("sluice %s --model on volume %s, want a hostPath", role, mv.Name)
			}
		}
	}

	// Security: non-root, read-only root, no privilege, every container.
	psc := ps.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s pod security context %+v: want runAsNonRoot and a non-zero runAsUser", role, psc)
	}
	for _, cc := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
		sc := cc.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s container %s security context %+v: want a read-only root, no privilege escalation, every capability dropped", role, cc.Name, sc)
		}
		if cc.Resources.Requests.Cpu().IsZero() || cc.Resources.Requests.Memory().IsZero() || cc.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s container %s: resources %+v: want cpu and memory requests and a memory limit", role, cc.Name, cc.Resources)
		}
		for _, m := range cc.VolumeMounts {
			if volume(ps, m.Name) == nil {
				t.Errorf("%s container %s mounts %s, which is not a volume of the pod", role, cc.Name, m.Name)
			}
		}
	}
	grace := int64(30) // the Kubernetes default
	if ps.TerminationGracePeriodSeconds != nil {
		grace = *ps.TerminationGracePeriodSeconds
	}
	if dt, err := parseDuration(given["drain-timeout"]); err != nil || float64(grace) <= dt {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed --drain-timeout %s, or the kubelet kills the drain", role, grace, given["drain-timeout"])
	}
}

func parseDuration(s string) (float64, error) {
	var d flag.FlagSet
	v := d.Duration("d", 0, "")
	if err := d.Parse([]string{"-d=" + s}); err != nil {
		return 0, err
	}
	return v.Seconds(), nil
}

// checkSecretItem checks that path, read through a mount of Secret
// volume sv, is one of its items, whose key the Secret (rendered or
// existing) holds.
func checkSecretItem(t *testing.T, role string, sv *corev1.Volume, path string, ps *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	m := mountOf(c, path)
	rel := strings.TrimPrefix(strings.TrimPrefix(path, m.MountPath), "/")
	for _, it := range sv.Secret.Items {
		if it.Path == rel {
			mode := sv.Secret.DefaultMode
			if it.Mode != nil {
				mode = it.Mode
			}
			if mode == nil || *mode&0o077 != 0 {
				t.Errorf("%s: secret volume %s gives %s a mode with group or other bits (or none: 0644)", role, sv.Name, it.Path)
			}
			return
		}
	}
	t.Errorf("%s: %s is not an item of secret volume %s (%v)", role, path, sv.Name, sv.Secret.Items)
}

// mountOf returns the mount of c under which path lies (the longest).
func mountOf(c *corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

// volumeAt returns the pod volume c sees path on.
func volumeAt(t *testing.T, ps *corev1.PodSpec, c *corev1.Container, path string) *corev1.Volume {
	t.Helper()
	m := mountOf(c, path)
	if m == nil {
		t.Fatalf("container %s: %q is on no mounted volume (mounts %v)", c.Name, path, c.VolumeMounts)
	}
	v := volume(ps, m.Name)
	if v == nil {
		t.Fatalf("container %s mounts %s, which is not a volume of the pod", c.Name, m.Name)
	}
	return v
}

func volume(ps *corev1.PodSpec, name string) *corev1.Volume {
	for i := range ps.Volumes {
		if ps.Volumes[i].Name == name {
			return &ps.Volumes[i]
		}
	}
	return nil
}

func TestChartDefaults(t *testing.T) {
	o := render(t, nil)
	check(t, o, want{handoffName: "rel-sluice-handoff", renderedKeys: true, pdbs: 3,
		replicas: map[string]int32{"router": 2, "prefill": 1, "decode": 1}})
	// The generated secret is long enough for sluice (tcp.MinSecret, 16).
	if s := o.secrets["rel-sluice-handoff"]; len(s.Data["secret"]) < 16 {
		t.Errorf("generated handoff secret holds %d bytes", len(s.Data["secret"]))
	}
}

func TestChartMultiTenantPVC(t *testing.T) {
	tenants := map[string]string{"sk-a-0123456789abcdef": "tenant-a", "sk-b-0123456789abcdef": "tenant-b", "sk-a2-0123456789abcdef": "tenant-a"}
	keys := map[string]any{}
	for k, v := range tenants {
		keys[k] = v
	}
	o := render(t, map[string]any{
		"apiKeys": map[string]any{"keys": keys},
		"model":   map[string]any{"file": "stories15M.gguf", "volume": "pvc", "context": "512"},
		"router":  map[string]any{"replicas": 3, "port": 8000, "adminPort": 9100, "servedModelName": "stories", "tenantMaxConcurrency": 8},
		"prefill": map[string]any{"port": 7001, "kvPoolTokens": 4096, "pageSize": 32},
		"decode":  map[string]any{"port": 7002, "adminPort": 9200, "replicas": 2, "extraArgs": []any{"--threads=4"}, "threads": 0},
	})
	check(t, o, want{multiTenant: true, tenants: tenants, handoffName: "rel-sluice-handoff", renderedKeys: true,
		modelFile: "/models/stories15M.gguf", modelVolume: "pvc", pdbs: 3,
		replicas: map[string]int32{"router": 3, "prefill": 1, "decode": 2}})
}

func TestChartExistingSecretsHostPath(t *testing.T) {
	o := render(t, map[string]any{
		"secret":  map[string]any{"existingSecret": "ops-handoff"},
		"apiKeys": map[string]any{"existingSecret": "ops-keys"},
		"model":   map[string]any{"file": "m.gguf", "volume": "hostPath", "mountPath": "/data"},
		"router":  map[string]any{"pdb": nil},
		"decode":  map[string]any{"pdb": map[string]any{"minAvailable": 1}},
	})
	check(t, o, want{multiTenant: true, handoffName: "ops-handoff", modelFile: "/data/m.gguf", modelVolume: "hostPath", pdbs: 2})
	if len(o.secrets) != 0 {
		names := make([]string, 0, len(o.secrets))
		for n := range o.secrets {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("the chart rendered Secrets %v though both are existing", names)
	}
}

// TestChartRefusesBadValues: values that would make a broken deployment
// fail at render time, not in a crash loop.
func TestChartRefusesBadValues(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"short secret":   {"secret": map[string]any{"value": "too-short"}},
		"unknown volume": {"model": map[string]any{"file": "m.gguf", "volume": "nfs"}},
	} {
		if _, err := renderDocs(vals); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

// TestStrictDecodingFails: the decoder the checks rely on refuses an
// unknown field (a misspelt key would otherwise vanish silently).
func TestStrictDecodingFails(t *testing.T) {
	doc := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  clusterIp: None\n"
	if _, _, err := strict.Decode([]byte(doc), nil, nil); err == nil || !runtime.IsStrictDecodingError(err) {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

// TestDockerfile checks the image textually (no docker engine here): a Go
// build stage that builds ./cmd/sluice static, a final stage that is
// distroless/static or scratch, runs as a non-root user and starts the
// binary it copied.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]string // instructions per stage, continuation lines joined
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
		if strings.HasSuffix(l, "\\") {
			continue
		}
		ins := strings.TrimSpace(cur.String())
		cur.Reset()
		if strings.HasPrefix(strings.ToUpper(ins), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("instruction before FROM: %q", ins)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], ins)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final stage", len(stages))
	}
	build := strings.Join(stages[0], "\n")
	if !regexp.MustCompile(`(?i)^FROM golang:\S+ AS (\S+)`).MatchString(stages[0][0]) {
		t.Errorf("build stage %q is not a golang image", stages[0][0])
	}
	if !regexp.MustCompile(`RUN .*CGO_ENABLED=0 .*go build .*-o (\S+) \./cmd/sluice`).MatchString(build) {
		t.Errorf("no static (CGO_ENABLED=0) go build of ./cmd/sluice in the build stage:\n%s", build)
	}
	final := stages[len(stages)-1]
	if !regexp.MustCompile(`^FROM (gcr\.io/distroless/static\S*|scratch)$`).MatchString(final[0]) {
		t.Errorf("final stage %q is neither distroless/static nor scratch", final[0])
	}
	var user, entry, copied string
	for _, ins := range final {
		f := strings.Fields(ins)
		switch strings.ToUpper(f[0]) {
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entry = ins
		case "COPY":
			if strings.HasPrefix(f[1], "--from=") {
				copied = f[len(f)-1]
			}
		}
	}
	if u := strings.Split(user, ":")[0]; u == "" || u == "0" || u == "root" {
		t.Errorf("final stage USER %q: want a non-root user", user)
	}
	if copied == "" || !strings.Contains(entry, `"`+copied+`"`) {
		t.Errorf("ENTRYPOINT %q does not run the binary copied from the build stage (%q)", entry, copied)
	}
}

// TestChartRouterTLS: router.tls.secretName mounts the Secret, passes its
// files to --tls-cert/--tls-key (flags the binary knows: check() compares
// every arg with `sluice router --help`), and switches the router's probes
// to HTTPS, which its admin listener then speaks; the workers keep HTTP.
func TestChartRouterTLS(t *testing.T) {
	o := render(t, map[string]any{"router": map[string]any{"tls": map[string]any{"secretName": "api-cert"}}})
	check(t, o, want{handoffName: "rel-sluice-handoff", renderedKeys: true, pdbs: 3,
		replicas: map[string]int32{"router": 2, "prefill": 1, "decode": 1}})
	d := o.deployments["router"]
	c := &d.Spec.Template.Spec.Containers[0]
	_, given := parseArgs(t, c.Args)
	if given["tls-cert"] != "/etc/sluice/tls/tls.crt" || given["tls-key"] != "/etc/sluice/tls/tls.key" {
		t.Errorf("router args %v: want --tls-cert/--tls-key under /etc/sluice/tls", c.Args)
	}
	v := volumeAt(t, &d.Spec.Template.Spec, c, "/etc/sluice/tls/tls.crt")
	if v.Secret == nil || v.Secret.SecretName != "api-cert" {
		t.Errorf("the TLS mount is %+v, want the Secret api-cert", v)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("router probe %s scheme %q, want HTTPS", p.HTTPGet.Path, p.HTTPGet.Scheme)
		}
	}
	for _, role := range []string{"prefill", "decode"} {
		wc := o.deployments[role].Spec.Template.Spec.Containers[0]
		if s := wc.ReadinessProbe.HTTPGet.Scheme; s != corev1.URISchemeHTTP {
			t.Errorf("%s probe scheme %q, want HTTP", role, s)
		}
	}
}

// TestContainerfile checks the registry-free image `make image` builds
// (the real check is `make image-check`, which runs it with podman): one
// stage FROM scratch that copies the host-built binary, runs as the same
// non-root user as deploy/Dockerfile's image (the uid the chart's
// podSecurityContext names) and starts the binary it copied.
func TestContainerfile(t *testing.T) {
	ins := func(file string) map[string]string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			k, v, _ := strings.Cut(l, " ")
			k = strings.ToUpper(k)
			if _, dup := m[k]; dup && k == "FROM" && file == "Containerfile" {
				t.Errorf("%s: more than one FROM: a stage pulling a base image needs a registry", file)
			}
			m[k] = strings.TrimSpace(v)
		}
		return m
	}
	c, d := ins("Containerfile"), ins("Dockerfile")
	if c["FROM"] != "scratch" {
		t.Errorf("Containerfile FROM %q, want scratch (no registry)", c["FROM"])
	}
	if u := strings.Split(c["USER"], ":")[0]; u == "" || u == "0" || u == "root" || c["USER"] != d["USER"] {
		t.Errorf("Containerfile USER %q: want Dockerfile's non-root %q", c["USER"], d["USER"])
	}
	f := strings.Fields(c["COPY"])
	if len(f) != 2 || f[0] != "sluice" || !strings.Contains(c["ENTRYPOINT"], `"`+f[1]+`"`) {
		t.Errorf("Containerfile COPY %q / ENTRYPOINT %q: want the context's sluice binary copied and run", c["COPY"], c["ENTRYPOINT"])
	}
}

// checkNetworkPolicies: one policy per role, selecting exactly that role's
// pods; its ingress rules name only that role's container ports; a worker's
// handoff port admits exactly the roles that dial it (prefill: the router;
// decode: the router and prefill), the router's API and every admin port
// admit any source (the values' apiFrom and adminFrom are empty).
func checkNetworkPolicies(t *testing.T, o objects) {
	t.Helper()
	if len(o.netpols) != len(o.deployments) {
		t.Errorf("%d NetworkPolicies, want one per role (%d)", len(o.netpols), len(o.deployments))
	}
	dialers := map[string][]string{"router": nil, "prefill": {"router"}, "decode": {"prefill", "router"}}
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		var role string
		for r, d := range o.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				if role != "" {
					t.Errorf("NetworkPolicy %s selects the pods of %s and %s", np.Name, role, r)
				}
				role = r
			}
		}
		if role == "" {
			t.Errorf("NetworkPolicy %s selects no pod of the chart", np.Name)
			continue
		}
		c := o.deployments[role].Spec.Template.Spec.Containers[0]
		port := map[int32]string{}
		for _, p := range c.Ports {
			port[p.ContainerPort] = p.Name
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s: policyTypes %v, want [Ingress]", np.Name, np.Spec.PolicyTypes)
		}
		seen := map[string]bool{}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				name := port[p.Port.IntVal]
				if name == "" {
					t.Errorf("NetworkPolicy %s admits port %v, not a port of the %s container", np.Name, p.Port, role)
					continue
				}
				seen[name] = true
				var from []string
				for _, peer := range rule.From {
					ps, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
					if err != nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
						t.Errorf("NetworkPolicy %s port %s: peer %+v is not a pod selector of this release", np.Name, name, peer)
						continue
					}
					for r, d := range o.deployments {
						if ps.Matches(labels.Set(d.Spec.Template.Labels)) {
							from = append(from, r)
						}
					}
				}
				slices.Sort(from)
				want := []string(nil)
				if name == "handoff" {
					want = dialers[role]
				}
				if !slices.Equal(from, want) {
					t.Errorf("NetworkPolicy %s port %s admits pods of %v, want %v (none: any source)", np.Name, name, from, want)
				}
			}
		}
		for _, p := range c.Ports {
			if !seen[p.Name] {
				t.Errorf("NetworkPolicy %s leaves the %s container's port %s closed", np.Name, role, p.Name)
			}
		}
	}
}

// TestInferencePoolExample: deploy/inferencepool selects exactly the chart's
// router pods of a release named "llm" and targets the router's API port
// (`make test-k8s` applies it to a real API server with the CRD).
func TestInferencePoolExample(t *testing.T) {
	f, err := os.Open("inferencepool/inferencepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pool struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Selector    struct{ MatchLabels map[string]string } `json:"selector"`
			TargetPorts []struct{ Number int32 }                `json:"targetPorts"`
		} `json:"spec"`
	}
	if err := k8syaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&pool); err != nil {
		t.Fatal(err)
	}
	if pool.APIVersion != "inference.networking.k8s.io/v1" || pool.Kind != "InferencePool" {
		t.Fatalf("%s %s, want inference.networking.k8s.io/v1 InferencePool", pool.APIVersion, pool.Kind)
	}
	o := render(t, nil)
	sel := maps.Clone(pool.Spec.Selector.MatchLabels)
	if sel["app.kubernetes.io/instance"] != "llm" {
		t.Errorf("selector %v: want release llm's pods", sel)
	}
	sel["app.kubernetes.io/instance"] = release // render's release name
	for role, d := range o.deployments {
		if m := labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)); m != (role == "router") {
			t.Errorf("the pool's selector matches %s pods: %v", role, m)
		}
	}
	c := o.deployments["router"].Spec.Template.Spec.Containers[0]
	if len(pool.Spec.TargetPorts) != 1 || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.ContainerPort == pool.Spec.TargetPorts[0].Number && p.Name != "admin"
	}) {
		t.Errorf("targetPorts %v: want the router's API port (container ports %v)", pool.Spec.TargetPorts, c.Ports)
	}
}
