//go:build k8s

package k8stest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	ns      = "sluice-test"
	release = "rel"
	full    = "rel-sluice"
	modelA  = "stories260K.gguf"
	modelB  = "tiny-qwen2-random-gpt2vocab.gguf"
	// The Gateway API Inference Extension release whose InferencePool CRD
	// (inference.networking.k8s.io/v1) the example is validated against.
	gieModule = "sigs.k8s.io/gateway-api-inference-extension@v1.0.1"
	maxTok    = 16
)

// Three tenants; their names must never show in /metrics.
var tenants = map[string]string{
	"sk-amber-5b1f0c2d9e8a7f64": "tenant-amber-4821",
	"sk-birch-0e9d8c7b6a5f4e31": "tenant-birch-9273",
	"sk-cedar-7a6b5c4d3e2f1a08": "tenant-cedar-3617",
}

var prompts = []string{"Once upon a time", "The little dog", "Lily wanted to", "One day, a big"}

type env struct {
	dir, bin, ctrSock, root string
	keys                    []string
	refs                    map[string]map[string]string // served model name -> prompt -> text
	name                    map[string]string            // model file -> the name the server reports
	svc                     string                       // router Service base URL
	http                    *http.Client
}

func TestK8s(t *testing.T) {
	e := setup(t)
	e.run(t, "install", e.checkInstall)
	e.run(t, "validation", e.checkValidation)
	e.run(t, "metrics-in-cluster", e.checkMetrics)
	e.run(t, "inferencepool", e.checkInferencePool)
	e.run(t, "delete-decode-pod", e.checkDeleteDecode)
	e.run(t, "upgrade-model", e.checkUpgrade)
	e.run(t, "scale-decode", e.checkScale)
}

// run prints the check's one line: PASS name: detail, or FAIL name: why.
func (e *env) run(t *testing.T, name string, f func() (string, error)) {
	start := time.Now()
	detail, err := f()
	took := time.Since(start).Round(time.Second)
	if err != nil {
		fmt.Printf("FAIL %s (%s): %v\n", name, took, err)
		t.Fail()
		return
	}
	fmt.Printf("PASS %s (%s): %s\n", name, took, detail)
}

func setup(t *testing.T) *env {
	e := &env{dir: os.Getenv("SLUICE_K8S_DIR"), bin: os.Getenv("SLUICE_K8S_BIN"), ctrSock: os.Getenv("SLUICE_K8S_CTR"),
		http: &http.Client{Timeout: 90 * time.Second}}
	if e.dir == "" || e.bin == "" {
		t.Fatal("run through scripts/k8s/test.sh (make test-k8s): SLUICE_K8S_DIR and SLUICE_K8S_BIN are not set")
	}
	wd, _ := os.Getwd()
	e.root = filepath.Dir(filepath.Dir(wd))
	for k := range tenants {
		e.keys = append(e.keys, k)
	}
	sort.Strings(e.keys)
	models := filepath.Join(e.dir, "models")
	if err := os.MkdirAll(models, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{modelA, modelB} {
		b, err := os.ReadFile(filepath.Join(e.root, "testdata", "models", m))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(models, m), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref := filepath.Join(e.dir, "sluice-ref")
	if out, err := exec.Command("go", "build", "-o", ref, filepath.Join(e.root, "cmd", "sluice")).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	e.refs, e.name = map[string]map[string]string{}, map[string]string{}
	for _, m := range []string{modelA, modelB} {
		r, name, err := e.reference(ref, filepath.Join(models, m))
		if err != nil {
			t.Fatalf("reference for %s: %v", m, err)
		}
		e.refs[name], e.name[m] = r, name
	}
	// The namespace enforces the "restricted" Pod Security Standard: a pod
	// of the chart that is not non-root, seccomp'd, capability-free... is
	// refused by the API server's admission, not just warned about.
	if _, err := e.kubectl("create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		t.Fatal(err)
	}
	// The models reach the pods through a PersistentVolumeClaim bound to a
	// hostPath PersistentVolume (a pod's own hostPath volume is not allowed
	// under "restricted").
	pv := fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"sluice-models"},
"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadOnlyMany"],"storageClassName":"","persistentVolumeReclaimPolicy":"Retain",
"hostPath":{"path":%q,"type":"Directory"}}}
---
{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"sluice-models","namespace":%q},
"spec":{"accessModes":["ReadOnlyMany"],"storageClassName":"","volumeName":"sluice-models","resources":{"requests":{"storage":"1Gi"}}}}`, models, ns)
	if _, err := e.kubectlIn(pv, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for k, v := range tenants {
		keys[k] = v
	}
	res := map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}, "limits": map[string]any{"cpu": "1", "memory": "512Mi"}}
	worker := map[string]any{"replicas": 2, "threads": 1, "kvMemory": "64MiB", "resources": res, "drainTimeout": "10s", "terminationGracePeriodSeconds": 20}
	vals := map[string]any{
		"image":      map[string]any{"repository": "localhost/sluice", "tag": "test", "pullPolicy": "Never"},
		"secretInit": map[string]any{"image": "localhost/busybox:test", "pullPolicy": "Never"},
		"model":      map[string]any{"file": modelA, "context": 256, "volume": "pvc", "pvc": map[string]any{"claimName": "sluice-models"}},
		"apiKeys":    map[string]any{"keys": keys},
		"router":     map[string]any{"replicas": 2, "resources": res, "drainTimeout": "10s", "terminationGracePeriodSeconds": 20},
		"prefill":    worker,
		"decode":     worker,
	}
	b, _ := json.Marshal(vals)
	if err := os.WriteFile(filepath.Join(e.dir, "values.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// reference runs `sluice serve --colocated` on loopback with the model and
// returns its greedy completion of every prompt: what every cluster
// response must equal (disaggregated output is colocated output, token for
// token).
func (e *env) reference(bin, model string) (map[string]string, string, error) {
	cmd := exec.Command(bin, "serve", "--colocated", "--model", model, "--context", "256", "--threads", "1",
		"--listen", "127.0.0.1:0", "--log-format", "json")
	var logs bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" {
				addr <- l.Addr
			}
		}
	}()
	var base string
	select {
	case base = <-addr:
	case <-time.After(60 * time.Second):
		return nil, "", fmt.Errorf("the reference server did not start: %s", logs.String())
	}
	out := map[string]string{}
	name := ""
	for _, p := range prompts {
		r := e.complete(base, "", p, false)
		if r.status != 200 || !r.done {
			return nil, "", fmt.Errorf("reference %q: %d %s", p, r.status, r.err)
		}
		out[p], name = r.text, r.model
	}
	return out, name, nil
}

// ------------------------------------------------------------------ tools

func (e *env) kubectl(args ...string) (string, error) { return e.kubectlIn("", args...) }

func (e *env) kubectlIn(stdin string, args ...string) (string, error) {
	return e.tool(stdin, filepath.Join(e.bin, "kubectl"), args...)
}

func (e *env) helm(args ...string) (string, error) {
	return e.tool("", filepath.Join(e.bin, "helm"), args...)
}

func (e *env) tool(stdin, bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (e *env) pods(role string) ([]corev1.Pod, error) {
	out, err := e.kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component="+role, "-o", "json")
	if err != nil {
		return nil, err
	}
	var l corev1.PodList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func ready(p corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyPods(e *env, role string) ([]corev1.Pod, error) {
	ps, err := e.pods(role)
	var r []corev1.Pod
	for _, p := range ps {
		if ready(p) {
			r = append(r, p)
		}
	}
	return r, err
}

func modelOf(p corev1.Pod) string {
	for _, a := range p.Spec.Containers[0].Args {
		if m, ok := strings.CutPrefix(a, "--model="); ok {
			return filepath.Base(m)
		}
	}
	return ""
}

func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func (e *env) get(url string) (string, error) {
	resp, err := e.http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

var upRE = regexp.MustCompile(`^sluice_cluster_worker_up\{([^}]*)\} (\S+)$`)
var picksRE = regexp.MustCompile(`^sluice_cluster_picks_total\{([^}]*)\} (\S+)$`)
var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

// routerView is what each ready router pod's /metrics says: role ->
// worker host (IP) -> up, and decode picks per worker host.
type routerView struct {
	pod   corev1.Pod
	up    map[string]map[string]bool
	picks map[string]float64
}

func (e *env) routerViews() ([]routerView, error) {
	rs, err := readyPods(e, "router")
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, errors.New("no ready router pod")
	}
	var vs []routerView
	for _, r := range rs {
		m, err := e.get("http://" + r.Status.PodIP + ":9090/metrics")
		if err != nil {
			return nil, err
		}
		v := routerView{pod: r, up: map[string]map[string]bool{}, picks: map[string]float64{}}
		for _, l := range strings.Split(m, "\n") {
			if g := upRE.FindStringSubmatch(l); g != nil {
				lab := labels(g[1])
				host := strings.Split(lab["worker"], ":")[0]
				if v.up[lab["role"]] == nil {
					v.up[lab["role"]] = map[string]bool{}
				}
				v.up[lab["role"]][host] = g[2] == "1"
			}
			if g := picksRE.FindStringSubmatch(l); g != nil {
				lab := labels(g[1])
				if lab["role"] == "decode" {
					var f float64
					fmt.Sscan(g[2], &f)
					v.picks[strings.Split(lab["worker"], ":")[0]] += f
				}
			}
		}
		vs = append(vs, v)
	}
	return vs, nil
}

func labels(s string) map[string]string {
	m := map[string]string{}
	for _, g := range labelRE.FindAllStringSubmatch(s, -1) {
		m[g[1]] = g[2]
	}
	return m
}

func upSet(m map[string]bool) []string {
	var s []string
	for h, up := range m {
		if up {
			s = append(s, h)
		}
	}
	sort.Strings(s)
	return s
}

func podIPs(ps []corev1.Pod) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Status.PodIP)
	}
	sort.Strings(s)
	return s
}

// converged: every ready router sees exactly the ready prefill and decode
// pods as up, and wants counts of each.
func (e *env) converged(nPrefill, nDecode int) error {
	pf, err := readyPods(e, "prefill")
	if err != nil {
		return err
	}
	dc, err := readyPods(e, "decode")
	if err != nil {
		return err
	}
	if len(pf) != nPrefill || len(dc) != nDecode {
		return fmt.Errorf("%d prefill and %d decode pods ready, want %d and %d", len(pf), len(dc), nPrefill, nDecode)
	}
	vs, err := e.routerViews()
	if err != nil {
		return err
	}
	for _, v := range vs {
		if got, want := upSet(v.up["prefill"]), podIPs(pf); !slices.Equal(got, want) {
			return fmt.Errorf("router %s sees prefill %v up, the ready prefill pods are %v", v.pod.Name, got, want)
		}
		if got, want := upSet(v.up["decode"]), podIPs(dc); !slices.Equal(got, want) {
			return fmt.Errorf("router %s sees decode %v up, the ready decode pods are %v", v.pod.Name, got, want)
		}
	}
	return nil
}

// ------------------------------------------------------------- requests

type result struct {
	prompt, key, model string
	stream             bool
	status             int
	text               string
	first              bool // a stream received at least one token of text
	done               bool // the response ended normally
	err                string
	at                 time.Time // when it ended
}

func (e *env) complete(base, key, prompt string, stream bool) result {
	r := result{prompt: prompt, key: key, stream: stream}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTok, "temperature": 0, "stream": stream})
	req, _ := http.NewRequest("POST", base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		r.err = strings.TrimSpace(string(b))
		return r
	}
	type chunk struct {
		Model   string
		Choices []struct {
			Text         string
			FinishReason *string `json:"finish_reason"`
		}
		Error *struct{ Message, Code string }
	}
	if !stream {
		var c chunk
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || len(c.Choices) == 0 {
			r.err = fmt.Sprintf("bad body: %v", err)
			return r
		}
		r.model, r.text, r.done = c.Model, c.Choices[0].Text, true
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	finished := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.done = finished
			if !finished {
				r.err = "[DONE] without a finish_reason"
			}
			return r
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			r.err = "bad event: " + data
			return r
		}
		if c.Error != nil {
			r.err = "error event: " + c.Error.Code + ": " + c.Error.Message
			return r
		}
		r.model = c.Model
		for _, ch := range c.Choices {
			if ch.Text != "" {
				r.first = true
			}
			r.text += ch.Text
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finished = true
			}
		}
	}
	r.err = fmt.Sprintf("stream ended without [DONE]: %v", sc.Err())
	return r
}

type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	rs   []result
}

// startLoad sends requests from n clients until finish: every tenant,
// every prompt, streamed and not.
func (e *env) startLoad(n int) *load {
	l := &load{stop: make(chan struct{})}
	for i := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for j := 0; ; j++ {
				select {
				case <-l.stop:
					return
				default:
				}
				r := e.complete(e.svc, e.keys[(i+j)%len(e.keys)], prompts[(i*7+j)%len(prompts)], (i+j)%2 == 0)
				r.at = time.Now()
				l.mu.Lock()
				l.rs = append(l.rs, r)
				l.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	return l
}

func (l *load) finish() []result {
	close(l.stop)
	l.wg.Wait()
	return l.rs
}

// verdict: a 200 must be exact (its text is the reference's for the model
// it names, and that model is one of models); a stream that sent text must
// finish; requests that failed before their first token are counted.
func (e *env) verdict(rs []result, files ...string) (ok, failed int, by map[string]int, err error) {
	by = map[string]int{}
	var models []string
	for _, f := range files {
		models = append(models, e.name[f])
	}
	var bad []string
	for _, r := range rs {
		switch {
		case r.done:
			want, known := e.refs[r.model][r.prompt]
			if !known || !slices.Contains(models, r.model) || r.text != want {
				bad = append(bad, fmt.Sprintf("WRONG 200 (model %q, stream %v) %q: %q, want %q", r.model, r.stream, r.prompt, r.text, want))
				continue
			}
			ok++
			for f, n := range e.name {
				if n == r.model {
					by[f]++
				}
			}
		case r.first:
			bad = append(bad, fmt.Sprintf("stream cut after its first token: %q: %s", r.text, r.err))
		default:
			failed++
			by[fmt.Sprintf("failed %d", r.status)]++
		}
	}
	if len(bad) > 0 {
		return ok, failed, by, fmt.Errorf("%d of %d requests wrong or cut, first: %s", len(bad), len(rs), bad[0])
	}
	if ok == 0 {
		return ok, failed, by, fmt.Errorf("no request succeeded (%v)", by)
	}
	return ok, failed, by, nil
}

// failures groups the requests that failed before their first token by
// status and error code: "12x 503 draining, 2x 502 handoff_failed".
func failures(rs []result) string {
	n := map[string]int{}
	for _, r := range rs {
		if r.done || r.first {
			continue
		}
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal([]byte(r.err), &body)
		k := fmt.Sprintf("%d %s", r.status, body.Error.Code)
		if r.status == 0 || body.Error.Code == "" {
			k = fmt.Sprintf("%d %.60s", r.status, r.err)
		}
		n[k]++
	}
	var s []string
	for k, c := range n {
		s = append(s, fmt.Sprintf("%dx %s", c, k))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func firstErrs(rs []result, n int) string {
	var s []string
	for _, r := range rs {
		if !r.done && !r.first && len(s) < n {
			s = append(s, fmt.Sprintf("%d %s", r.status, r.err))
		}
	}
	return strings.Join(s, "; ")
}

// ---------------------------------------------------------------- checks

func (e *env) checkInstall() (string, error) {
	start := time.Now()
	if _, err := e.helm("install", release, filepath.Join(e.root, "deploy", "helm", "sluice"), "-n", ns,
		"-f", filepath.Join(e.dir, "values.json"), "--wait", "--timeout", "5m"); err != nil {
		e.dumpPods()
		return "", err
	}
	took := time.Since(start).Round(time.Second)
	out, err := e.kubectl("get", "svc", "-n", ns, full+"-router", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return "", err
	}
	e.svc = "http://" + out
	var n int
	for _, role := range []string{"router", "prefill", "decode"} {
		ps, err := e.pods(role)
		if err != nil {
			return "", err
		}
		for _, p := range ps {
			if !ready(p) {
				return "", fmt.Errorf("pod %s is not Ready", p.Name)
			}
			n++
		}
	}
	// The routers found 2 prefill and 2 decode pods through the headless
	// Services (cluster DNS) and vetted them.
	if err := waitFor(60*time.Second, func() error { return e.converged(2, 2) }); err != nil {
		return "", err
	}
	// Every tenant, every prompt, streamed and not, through the Service.
	var rs []result
	for _, k := range e.keys {
		for _, p := range prompts {
			for _, s := range []bool{false, true} {
				rs = append(rs, e.complete(e.svc, k, p, s))
			}
		}
	}
	ok, failed, _, err := e.verdict(rs, modelA)
	if err != nil {
		return "", err
	}
	if failed > 0 {
		return "", fmt.Errorf("%d of %d requests failed: %s", failed, len(rs), firstErrs(rs, 3))
	}
	vs, _ := e.routerViews()
	return fmt.Sprintf("helm install --wait %s; %d pods Ready; %d routers each see 2 prefill + 2 decode pods up via the headless Services; %d/%d requests of 3 tenants equal the colocated reference",
		took, n, len(vs), ok, len(rs)), nil
}

func (e *env) dumpPods() {
	out, _ := e.kubectl("get", "pods", "-A", "-o", "wide")
	fmt.Println(out)
	ev, _ := e.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp")
	fmt.Println(ev)
}

func (e *env) checkDeleteDecode() (string, error) {
	dc, err := readyPods(e, "decode")
	if err != nil || len(dc) != 2 {
		return "", fmt.Errorf("want 2 ready decode pods before: %d %v", len(dc), err)
	}
	victim := dc[0]
	model := e.servedModel()
	l := e.startLoad(4)
	time.Sleep(3 * time.Second)
	if _, err := e.kubectl("delete", "pod", "-n", ns, victim.Name, "--wait=false"); err != nil {
		l.finish()
		return "", err
	}
	var newIP string
	err = waitFor(180*time.Second, func() error {
		if err := e.converged(2, 2); err != nil {
			return err
		}
		ps, _ := readyPods(e, "decode")
		for _, p := range ps {
			if p.Name == victim.Name {
				return errors.New("the deleted pod is still ready")
			}
			if p.Name != dc[1].Name {
				newIP = p.Status.PodIP
			}
		}
		if newIP == "" {
			return errors.New("no replacement decode pod yet")
		}
		return nil
	})
	if err != nil {
		l.finish()
		return "", err
	}
	// The replacement takes traffic: the routers pick it.
	var picks float64
	err = waitFor(60*time.Second, func() error {
		vs, err := e.routerViews()
		if err != nil {
			return err
		}
		picks = 0
		for _, v := range vs {
			picks += v.picks[newIP]
		}
		if picks == 0 {
			return fmt.Errorf("no router picked the replacement decode pod %s", newIP)
		}
		return nil
	})
	rs := l.finish()
	if err != nil {
		return "", err
	}
	ok, failed, _, err := e.verdict(rs, model)
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("%d requests under load: %d exact, 0 wrong, 0 streams cut after their first token, %d failed before their first token; the replacement %s joined and was picked %v times",
		len(rs), ok, failed, newIP, picks)
	if failed > 0 {
		detail += " (" + failures(rs) + ")"
	}
	return detail, nil
}

func (e *env) checkUpgrade() (string, error) {
	// While the upgrade rolls, sample every router: a worker it counts as
	// up must run the router's own model (I13); a mixed pair never serves.
	var mu sync.Mutex
	var mismatch []string
	samples := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			model := map[string]string{}
			for _, role := range []string{"prefill", "decode"} {
				ps, _ := e.pods(role)
				for _, p := range ps {
					model[p.Status.PodIP] = modelOf(p)
				}
			}
			vs, err := e.routerViews()
			if err != nil {
				continue
			}
			mu.Lock()
			samples++
			for _, v := range vs {
				rm := modelOf(v.pod)
				for role, ws := range v.up {
					for host, up := range ws {
						if up && model[host] != "" && model[host] != rm {
							mismatch = append(mismatch, fmt.Sprintf("router %s (%s) counts %s %s (%s) up", v.pod.Name, rm, role, host, model[host]))
						}
					}
				}
			}
			mu.Unlock()
		}
	}()
	l := e.startLoad(4)
	time.Sleep(2 * time.Second)
	start := time.Now()
	_, uerr := e.helm("upgrade", release, filepath.Join(e.root, "deploy", "helm", "sluice"), "-n", ns,
		"--reuse-values", "--set", "model.file="+modelB, "--wait", "--timeout", "6m")
	took := time.Since(start).Round(time.Second)
	cerr := waitFor(120*time.Second, func() error { return e.converged(2, 2) })
	time.Sleep(3 * time.Second)
	rs := l.finish()
	close(stop)
	<-done
	if uerr != nil {
		e.dumpPods()
		return "", uerr
	}
	if cerr != nil {
		return "", cerr
	}
	if len(mismatch) > 0 {
		return "", fmt.Errorf("%d samples saw a router count a worker of another model as up, first: %s", len(mismatch), mismatch[0])
	}
	ok, failed, by, err := e.verdict(rs, modelA, modelB)
	if err != nil {
		return "", err
	}
	// After the upgrade every answer is model B's.
	var after []result
	for _, k := range e.keys {
		after = append(after, e.complete(e.svc, k, prompts[0], false))
	}
	if aok, afailed, _, err := e.verdict(after, modelB); err != nil || afailed > 0 || aok != len(after) {
		return "", fmt.Errorf("after the upgrade: %v (%s)", err, firstErrs(after, 2))
	}
	return fmt.Sprintf("helm upgrade --wait to %s took %s; %d requests during it: %d exact (%d by %s, %d by %s), 0 wrong, 0 streams cut, %d failed before their first token (%s); %d samples of every router's workers: none counted a worker of another model as up",
		modelB, took, len(rs), ok, by[modelA], modelA, by[modelB], modelB, failed, failures(rs), samples), nil
}

// servedModel: the model the ready routers run (after a failed upgrade
// check it may still be the first one).
func (e *env) servedModel() string {
	rs, _ := readyPods(e, "router")
	if len(rs) == 0 {
		return ""
	}
	return modelOf(rs[0])
}

func (e *env) checkScale() (string, error) {
	model := e.servedModel()
	l := e.startLoad(4)
	before, _ := readyPods(e, "decode")
	time.Sleep(2 * time.Second)
	if _, err := e.kubectl("scale", "-n", ns, "deployment/"+full+"-decode", "--replicas=3"); err != nil {
		l.finish()
		return "", err
	}
	if err := waitFor(180*time.Second, func() error { return e.converged(2, 3) }); err != nil {
		l.finish()
		return "", fmt.Errorf("scale to 3: %v", err)
	}
	grown, _ := readyPods(e, "decode")
	var joined string
	for _, p := range grown {
		if !slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.Name == p.Name }) {
			joined = p.Status.PodIP
		}
	}
	var picks float64
	perr := waitFor(60*time.Second, func() error {
		vs, err := e.routerViews()
		if err != nil {
			return err
		}
		picks = 0
		for _, v := range vs {
			picks += v.picks[joined]
		}
		if picks == 0 {
			return fmt.Errorf("no router picked the new decode pod %s", joined)
		}
		return nil
	})
	if perr != nil {
		l.finish()
		return "", perr
	}
	downAt := time.Now()
	if _, err := e.kubectl("scale", "-n", ns, "deployment/"+full+"-decode", "--replicas=1"); err != nil {
		l.finish()
		return "", err
	}
	err := waitFor(180*time.Second, func() error {
		if err := e.converged(2, 1); err != nil {
			return err
		}
		ps, err := e.pods("decode")
		if err != nil {
			return err
		}
		if len(ps) != 1 {
			return fmt.Errorf("%d decode pods exist (terminating ones included), want 1", len(ps))
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	rs := l.finish()
	if err != nil {
		return "", fmt.Errorf("scale to 1: %v", err)
	}
	ok, failed, _, verr := e.verdict(rs, model)
	if verr != nil {
		return "", verr
	}
	if failed > 0 {
		var up, down []result
		for _, r := range rs {
			if r.at.Before(downAt) {
				up = append(up, r)
			} else {
				down = append(down, r)
			}
		}
		return "", fmt.Errorf("%d of %d requests lost while scaling 2 -> 3 -> 1 (up: [%s], down: [%s]); %d exact, 0 wrong, 0 streams cut", failed, len(rs), failures(up), failures(down), ok)
	}
	return fmt.Sprintf("decode 2 -> 3: the new pod %s passed the routers' checks (up on every router) and was picked %v times; 3 -> 1: the two leaving pods drained; %d requests under load, all %d exact, none lost",
		joined, picks, len(rs), ok), nil
}

func (e *env) checkValidation() (string, error) {
	const vns = "sluice-validate"
	if _, err := e.kubectl("create", "namespace", vns); err != nil {
		return "", err
	}
	defer e.kubectl("delete", "namespace", vns, "--wait=false")
	if _, err := e.kubectl("label", "namespace", vns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		return "", err
	}
	ver, err := e.kubectl("version", "-o", "json")
	if err != nil {
		return "", err
	}
	var v struct {
		Server struct{ GitVersion string } `json:"serverVersion"`
	}
	json.Unmarshal([]byte(ver), &v)
	manifest, err := e.helm("template", release, filepath.Join(e.root, "deploy", "helm", "sluice"), "-n", vns,
		"--kube-version", v.Server.GitVersion, "-f", filepath.Join(e.dir, "values.json"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(e.bin, "kubectl"), "create", "--dry-run=server", "--validate=strict", "-n", vns, "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("the API server refused the rendered chart: %v: %s", err, errb.String())
	}
	if w := strings.TrimSpace(errb.String()); w != "" {
		return "", fmt.Errorf("the API server warned: %s", w)
	}
	kinds := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if k, _, ok := strings.Cut(l, "/"); ok {
			kinds[k]++
		}
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(ks)
	// The real pods: every running container's process, found through the
	// cluster's containerd, runs as a non-root uid with "/" mounted read-only.
	var checked int
	var uids []string
	for _, role := range []string{"router", "prefill", "decode"} {
		ps, err := readyPods(e, role)
		if err != nil {
			return "", err
		}
		for _, p := range ps {
			for _, cs := range p.Status.ContainerStatuses {
				id := strings.TrimPrefix(cs.ContainerID, "containerd://")
				pid, err := e.taskPID(id)
				if err != nil {
					return "", fmt.Errorf("%s/%s: %v", p.Name, cs.Name, err)
				}
				uid, ro, err := procIdentity(pid)
				if err != nil {
					return "", err
				}
				if uid == "0" || !ro {
					return "", fmt.Errorf("%s/%s (pid %d) runs as uid %s, root file system read-only: %v", p.Name, cs.Name, pid, uid, ro)
				}
				checked++
				if !slices.Contains(uids, uid) {
					uids = append(uids, uid)
				}
			}
		}
	}
	if kinds["networkpolicy.networking.k8s.io"] == 0 {
		return "", fmt.Errorf("accepted with no warning by server-side dry run (%s), but the chart renders no NetworkPolicy", strings.Join(ks, ", "))
	}
	return fmt.Sprintf("server-side dry run (--validate=strict, namespace enforcing the restricted Pod Security Standard) accepted %s with no warning; %d running containers all run as uid %s with a read-only root",
		strings.Join(ks, ", "), checked, strings.Join(uids, ",")), nil
}

func (e *env) taskPID(id string) (int, error) {
	out, err := exec.Command("ctr", "-a", e.ctrSock, "-n", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == id {
			var pid int
			_, err := fmt.Sscan(f[1], &pid)
			return pid, err
		}
	}
	return 0, fmt.Errorf("no task %s in containerd", id)
}

// procIdentity: the process's real, effective, saved and fs uids (all must
// be one non-zero uid) and whether its "/" is mounted read-only.
func procIdentity(pid int) (uid string, ro bool, err error) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", false, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(v)
			uid = f[0]
			for _, u := range f {
				if u == "0" {
					uid = "0"
				}
			}
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return "", false, err
	}
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			ro = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	return uid, ro, nil
}

// gatewayNames: the vLLM-named series each role must export (the router
// queues but holds no KV; a prefill worker holds KV but does not queue).
var gatewayNames = map[string][]string{
	"router":  {"vllm:num_requests_waiting", "vllm:num_requests_running"},
	"prefill": {"vllm:kv_cache_usage_perc", "vllm:cache_config_info"},
	"decode":  {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"},
}

func (e *env) checkMetrics() (string, error) {
	// Under some load first, so the counters have something to show.
	for _, k := range e.keys {
		e.complete(e.svc, k, prompts[1], false)
	}
	var urls []string
	role := map[string]string{}
	for _, r := range []string{"router", "prefill", "decode"} {
		ps, err := readyPods(e, r)
		if err != nil {
			return "", err
		}
		for _, p := range ps {
			u := "http://" + p.Status.PodIP + ":9090/metrics"
			urls = append(urls, u)
			role[u] = r
		}
	}
	script := "for u in " + strings.Join(urls, " ") + "; do echo \"=== $u\"; wget -q -O - \"$u\" || echo WGET-FAILED; done"
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "scrape", "namespace": ns},
		"spec": map[string]any{
			"restartPolicy":                "Never",
			"automountServiceAccountToken": false,
			"securityContext":              map[string]any{"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers": []any{map[string]any{
				"name": "scrape", "image": "localhost/busybox:test", "imagePullPolicy": "Never",
				"command": []string{"/bin/sh", "-c", script},
				"securityContext": map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
					"capabilities": map[string]any{"drop": []string{"ALL"}}},
			}},
		},
	}
	b, _ := json.Marshal(pod)
	if _, err := e.kubectlIn(string(b), "apply", "-f", "-"); err != nil {
		return "", err
	}
	defer e.kubectl("delete", "pod", "-n", ns, "scrape", "--wait=false")
	if err := waitFor(90*time.Second, func() error {
		out, err := e.kubectl("get", "pod", "-n", ns, "scrape", "-o", "jsonpath={.status.phase}")
		if err != nil {
			return err
		}
		if out != "Succeeded" {
			return fmt.Errorf("the scraper pod is %s", out)
		}
		return nil
	}); err != nil {
		return "", err
	}
	logs, err := e.kubectl("logs", "-n", ns, "scrape")
	if err != nil {
		return "", err
	}
	if strings.Contains(logs, "WGET-FAILED") {
		return "", fmt.Errorf("a scrape failed inside the cluster:\n%s", logs)
	}
	for k, name := range tenants {
		if strings.Contains(logs, name) || strings.Contains(logs, k) {
			return "", fmt.Errorf("/metrics names tenant %s", name)
		}
	}
	series := map[string]int{}
	var missing []string
	for _, sec := range strings.Split(logs, "=== ")[1:] {
		u, body, _ := strings.Cut(sec, "\n")
		r := role[strings.TrimSpace(u)]
		for _, l := range strings.Split(body, "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				series[r]++
			}
		}
		for _, m := range gatewayNames[r] {
			if !strings.Contains(body, "\n"+m+"{") {
				missing = append(missing, r+" "+m)
			}
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("missing gateway metrics: %v", missing)
	}
	return fmt.Sprintf("a pod in the cluster scraped %d admin ports (%d router, %d prefill, %d decode series); the vLLM-named gauges are there (router: waiting/running; prefill: KV usage/config; decode: all four); no tenant name or key in any", len(urls), series["router"], series["prefill"], series["decode"]), nil
}

// checkInferencePool installs the InferencePool CRD from the Inference
// Extension's Go module, creates deploy/inferencepool's pool (release
// renamed to this one's) and checks the API server accepts it with no
// warning, refuses a pool that breaks the schema (so the schema is really
// enforced), and that the pool's selector picks exactly the router pods.
func (e *env) checkInferencePool() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", gieModule)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %v", gieModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", gieModule, err, out)
	}
	crd := filepath.Join(mod.Dir, "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
	if _, err := e.kubectl("create", "-f", crd); err != nil {
		return "", err
	}
	if _, err := e.kubectl("wait", "--for=condition=Established", "crd/inferencepools.inference.networking.k8s.io", "--timeout=60s"); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(e.root, "deploy", "inferencepool", "inferencepool.yaml"))
	if err != nil {
		return "", err
	}
	pool := strings.Replace(string(b), "app.kubernetes.io/instance: llm", "app.kubernetes.io/instance: "+release, 1)
	if pool == string(b) {
		return "", errors.New("the example names no release llm to replace")
	}
	// A pool that breaks the CRD's schema (two target ports, at most one
	// allowed) must be refused: the check below is not vacuous.
	bad := strings.Replace(pool, "    - number: 8080\n", "    - number: 8080\n    - number: 8081\n", 1)
	if bad == pool {
		return "", errors.New("cannot build the invalid variant of the example")
	}
	if _, err := e.kubectlIn(bad, "create", "--dry-run=server", "-n", ns, "-f", "-"); err == nil {
		return "", errors.New("the API server accepted a pool with two targetPorts: the CRD's schema is not enforced")
	}
	c := exec.Command(filepath.Join(e.bin, "kubectl"), "create", "--validate=strict", "-n", ns, "-f", "-")
	c.Stdin = strings.NewReader(pool)
	var so, se bytes.Buffer
	c.Stdout, c.Stderr = &so, &se
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("the API server refused the example: %v: %s", err, se.String())
	}
	if w := strings.TrimSpace(se.String()); w != "" {
		return "", fmt.Errorf("the API server warned: %s", w)
	}
	// The stored pool's selector, as the API server kept it.
	js, err := e.kubectl("get", "inferencepool", "-n", ns, "sluice", "-o", "json")
	if err != nil {
		return "", err
	}
	var stored struct {
		Spec struct {
			Selector struct{ MatchLabels map[string]string } `json:"selector"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(js), &stored); err != nil {
		return "", err
	}
	var sel []string
	for k, v := range stored.Spec.Selector.MatchLabels {
		sel = append(sel, k+"="+v)
	}
	got, err := e.kubectl("get", "pods", "-n", ns, "-l", strings.Join(sel, ","), "-o", "name")
	if err != nil {
		return "", err
	}
	for _, p := range strings.Fields(got) {
		if !strings.Contains(p, "-router-") {
			return "", fmt.Errorf("the pool's selector picks %s", p)
		}
	}
	all, _ := e.kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance="+release, "-o", "name")
	rs, _ := e.pods("router")
	if n := len(strings.Fields(got)); n != len(rs) || n == 0 {
		return "", fmt.Errorf("the pool's selector picks %d pods, the release has %d router pods", n, len(rs))
	}
	return fmt.Sprintf("CRD from %s installed; the example was accepted with no warning (a two-port variant refused); its selector picks the %d router pods of the %d pods of the release",
		gieModule, len(strings.Fields(got)), len(strings.Fields(all))), nil
}
