// Package helm_test renders the Nubes chart (helm/nubes) with the helm
// binary and decodes every manifest strictly into its Kubernetes API type,
// so a misspelt or misplaced field fails here instead of being dropped by
// the API server. It then checks what the chart promises: one Deployment,
// Service, PodDisruptionBudget (and HorizontalPodAutoscaler when
// autoscaled) per enabled service, probes, security contexts, secrets and
// routes. `make helm` runs it with HELM set to the binary it installed.
package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const chart = "../../helm/nubes"

// reflectionPath is where the upstream console reads the list of
// operations; the Ingress sends it to identity, which lists the suite.
const reflectionPath = "/console-api/api/reflection"

// specPrefixes are the path prefixes of the spec's services.
var specPrefixes = map[string]string{
	"identity": "/identity", "inventory": "/inventory", "monitoring": "/monitoring",
	"cost-analysis": "/cost-analysis", "repository": "/repository", "board": "/board",
	"secret": "/secret", "notification": "/notification", "dashboard": "/dashboard", "config": "/config",
}

// newObject returns the typed object a manifest of apiVersion and kind
// decodes into. A kind the chart starts rendering must be added here.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	}
	return nil, false
}

func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	found, _ := filepath.Glob("../../.tools/helm-*/helm")
	if len(found) == 0 {
		t.Fatal("no helm: run `make helm` (it installs helm under .tools/) or set HELM")
	}
	return found[len(found)-1]
}

// render runs helm template with the values files (written to a temp dir
// when given as YAML text) and returns stdout, or the error with stderr.
func render(t *testing.T, values ...string) (string, error) {
	t.Helper()
	args := []string{"template", "nubes", chart, "--namespace", "nubes"}
	for i, v := range values {
		if strings.HasSuffix(v, ".yaml") && !strings.Contains(v, "\n") {
			args = append(args, "-f", v)
			continue
		}
		f := filepath.Join(t.TempDir(), fmt.Sprintf("values-%d.yaml", i))
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	cmd := exec.Command(helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// manifests is one render, decoded.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	accounts    map[string]*corev1.ServiceAccount
	ingresses   map[string]*networkingv1.Ingress
	policies    map[string]*networkingv1.NetworkPolicy
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits the output of helm template and decodes every document
// strictly: an unknown field, a duplicate key or a wrong type fails.
func decode(t *testing.T, out string) *manifests {
	t.Helper()
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		accounts: map[string]*corev1.ServiceAccount{}, ingresses: map[string]*networkingv1.Ingress{},
		policies: map[string]*networkingv1.NetworkPolicy{},
	}
	n := 0
	for _, doc := range docSep.Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		source := "?"
		if i := strings.Index(doc, "# Source: "); i >= 0 {
			source, _, _ = strings.Cut(doc[i+len("# Source: "):], "\n")
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: not YAML: %v", source, err)
		}
		obj, ok := newObject(tm.APIVersion, tm.Kind)
		if !ok {
			t.Fatalf("%s: %s %s is not a kind this test knows; add it to newObject", source, tm.APIVersion, tm.Kind)
		}
		if err := strictDecode(doc, obj); err != nil {
			t.Fatalf("%s: %s does not decode strictly: %v", source, tm.Kind, err)
		}
		n++
		switch o := obj.(type) {
		case *appsv1.Deployment:
			put(t, m.deployments, o.Name, o)
		case *corev1.Service:
			put(t, m.services, o.Name, o)
		case *policyv1.PodDisruptionBudget:
			put(t, m.pdbs, o.Name, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			put(t, m.hpas, o.Name, o)
		case *corev1.ConfigMap:
			put(t, m.configMaps, o.Name, o)
		case *corev1.Secret:
			put(t, m.secrets, o.Name, o)
		case *corev1.ServiceAccount:
			put(t, m.accounts, o.Name, o)
		case *networkingv1.Ingress:
			put(t, m.ingresses, o.Name, o)
		case *networkingv1.NetworkPolicy:
			put(t, m.policies, o.Name, o)
		}
	}
	if n == 0 {
		t.Fatal("helm rendered nothing")
	}
	return m
}

// strictDecode decodes one YAML manifest the way the API server's strict
// field validation does: field names are case-sensitive (encoding/json
// alone would accept readOnlyRootFileSystem), and unknown or duplicate
// fields are errors.
func strictDecode(doc string, obj any) error {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func put[T any](t *testing.T, m map[string]T, name string, v T) {
	t.Helper()
	if _, dup := m[name]; dup {
		t.Fatalf("two objects of one kind named %s", name)
	}
	m[name] = v
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

// want is what a render must contain.
type want struct {
	services       []string          // enabled services: a Deployment, Service and PDB each
	autoscaled     []string          // those with an HPA (and no replicas field)
	routes         map[string]string // Ingress path -> service; nil: no Ingress
	secret         string            // the Secret every secretKeyRef names
	secretRendered bool              // the chart renders that Secret
	jwksFile       bool              // JWKS from the chart's ConfigMap, not a URL
}

func (w want) check(t *testing.T, m *manifests) {
	t.Helper()
	full := func(s string) string { return "nubes-" + s }
	var names []string
	for _, s := range w.services {
		names = append(names, full(s))
	}
	slices.Sort(names)
	if got := slices.Sorted(maps.Keys(m.deployments)); !slices.Equal(got, names) {
		t.Fatalf("Deployments %v, want %v", got, names)
	}
	var svcNames []string
	for n, svc := range m.services {
		if n == internalOnly {
			// The Ingress's backend for internalPaths: it must reach no pod.
			if len(svc.Spec.Selector) != 0 {
				t.Fatalf("Service %s selects pods %v", n, svc.Spec.Selector)
			}
			continue
		}
		if !strings.Contains(n, "-plugin-") {
			svcNames = append(svcNames, n)
		}
	}
	slices.Sort(svcNames)
	if !slices.Equal(svcNames, names) {
		t.Fatalf("Services %v, want %v", svcNames, names)
	}
	if got := slices.Sorted(maps.Keys(m.pdbs)); !slices.Equal(got, names) {
		t.Fatalf("PodDisruptionBudgets %v, want %v", got, names)
	}
	var scaled []string
	for _, s := range w.autoscaled {
		scaled = append(scaled, full(s))
	}
	slices.Sort(scaled)
	if got := slices.Sorted(maps.Keys(m.hpas)); !slices.Equal(got, scaled) {
		t.Fatalf("HorizontalPodAutoscalers %v, want %v", got, scaled)
	}
	if _, ok := m.secrets[w.secret]; ok != w.secretRendered {
		t.Fatalf("Secret %s rendered: %v, want %v", w.secret, ok, w.secretRendered)
	}

	for name, d := range m.deployments {
		if strings.Contains(name, "-plugin-") {
			continue
		}
		checkDeployment(t, m, w, name, d)
		svc := m.services[name]
		if !maps.Equal(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
			t.Fatalf("Service %s does not select its Deployment's pods on port http: %+v", name, svc.Spec)
		}
		if pdb := m.pdbs[name]; !maps.Equal(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Fatalf("PodDisruptionBudget %s selects %v", name, pdb.Spec.Selector.MatchLabels)
		}
		hpa, scaled := m.hpas[name]
		if scaled {
			if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != name ||
				hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
				t.Fatalf("HorizontalPodAutoscaler %s: %+v", name, hpa.Spec)
			}
			if d.Spec.Replicas != nil {
				t.Fatalf("Deployment %s sets replicas although an HPA scales it", name)
			}
		} else if d.Spec.Replicas == nil {
			t.Fatalf("Deployment %s has no replicas and no HPA", name)
		}
	}

	if w.routes == nil {
		if len(m.ingresses) != 0 {
			t.Fatalf("an Ingress was rendered: %v", slices.Collect(maps.Keys(m.ingresses)))
		}
		return
	}
	checkNoInternalPathReachesAPod(t, m)
	ing, ok := m.ingresses["nubes"]
	if !ok || len(m.ingresses) != 1 || len(ing.Spec.Rules) != 1 {
		t.Fatalf("want one Ingress nubes with one rule, got %v", m.ingresses)
	}
	got := map[string]string{}
	for _, p := range ing.Spec.Rules[0].HTTP.Paths {
		// The console's reflection list and the internal paths are exact
		// paths; services own their prefixes.
		wantType := networkingv1.PathTypePrefix
		if p.Path == reflectionPath || slices.Contains(internalPaths, p.Path) {
			wantType = networkingv1.PathTypeExact
		}
		if p.PathType == nil || *p.PathType != wantType {
			t.Fatalf("route %s is not of type %s", p.Path, wantType)
		}
		b := p.Backend.Service
		if _, ok := m.services[b.Name]; !ok || b.Port.Name != "http" {
			t.Fatalf("route %s goes to %s port %q, not a rendered Service's http port", p.Path, b.Name, b.Port.Name)
		}
		got[p.Path] = strings.TrimPrefix(b.Name, "nubes-")
	}
	if !maps.Equal(got, w.routes) {
		t.Fatalf("routes %v, want %v", got, w.routes)
	}
}

func checkDeployment(t *testing.T, m *manifests, w want, name string, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if !maps.Equal(d.Spec.Selector.MatchLabels, subset(d.Spec.Template.Labels, d.Spec.Selector.MatchLabels)) {
		t.Fatalf("%s: selector %v does not match the pod labels %v", name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Fatalf("%s: pod must run as non-root: %+v", name, psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Fatalf("%s: mounts a service account token", name)
	}
	if _, ok := m.accounts[pod.ServiceAccountName]; !ok {
		t.Fatalf("%s: service account %s not rendered", name, pod.ServiceAccountName)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Fatalf("%s: container security context %+v", name, sc)
	}
	if len(c.Ports) != 2 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 || c.Ports[1].Name != "grpc" || c.Ports[1].ContainerPort != 50051 {
		t.Fatalf("%s: ports %+v", name, c.Ports)
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.StrVal != "http" {
			t.Fatalf("%s: want a probe on %s, got %+v", name, probe, p)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Fatalf("%s: resources %+v", name, c.Resources)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Fatalf("%s: env %s twice", name, e.Name)
		}
		env[e.Name] = e
		// No credential is an environment variable: not from a Secret,
		// not inline.
		if e.ValueFrom != nil {
			t.Fatalf("%s: %s comes from %+v; credentials are mounted files", name, e.Name, e.ValueFrom)
		}
		if credentialName.MatchString(e.Name) && !strings.HasSuffix(e.Name, "_FILE") {
			t.Fatalf("%s: %s is a credential in the environment", name, e.Name)
		}
	}
	files := secretFiles(t, name, pod, c, w.secret)
	if files["NUBES_MONGO_URI"] != "mongo-uri" {
		t.Fatalf("%s: NUBES_MONGO_URI_FILE does not read the Secret's mongo-uri: %v", name, files)
	}
	for k := range files {
		if _, inline := env[k]; inline {
			t.Fatalf("%s: %s set both inline and from a file", name, k)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil {
		t.Fatalf("%s: envFrom %+v", name, c.EnvFrom)
	}
	cm, ok := m.configMaps[c.EnvFrom[0].ConfigMapRef.Name]
	if !ok {
		t.Fatalf("%s: ConfigMap %s not rendered", name, c.EnvFrom[0].ConfigMapRef.Name)
	}
	for k := range cm.Data {
		if !regexp.MustCompile(`^NUBES_[A-Z0-9_]+$`).MatchString(k) {
			t.Fatalf("ConfigMap %s: %s is not a NUBES_ variable", cm.Name, k)
		}
	}
	if _, file := cm.Data["NUBES_JWKS_FILE"]; file != w.jwksFile {
		t.Fatalf("%s: NUBES_JWKS_FILE set: %v, want %v", name, file, w.jwksFile)
	}
	if !w.jwksFile && cm.Data["NUBES_JWKS_URL"] == "" {
		t.Fatalf("%s: no NUBES_JWKS_URL", name)
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
		if vm.MountPath != "/tmp" && !vm.ReadOnly {
			t.Fatalf("%s: %s is mounted writable", name, vm.MountPath)
		}
	}
	if pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("%s: seccomp %+v", name, pod.SecurityContext.SeccompProfile)
	}
	for _, v := range pod.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			t.Fatalf("%s: volume %s not mounted", name, v.Name)
		}
		if v.ConfigMap != nil {
			if _, ok := m.configMaps[v.ConfigMap.Name]; !ok {
				t.Fatalf("%s: volume from ConfigMap %s, not rendered", name, v.ConfigMap.Name)
			}
		}
		delete(mounts, v.Name)
	}
	if len(mounts) != 0 || !slices.Contains(slices.Collect(maps.Keys(mountPaths(c))), "/tmp") {
		t.Fatalf("%s: mounts without volumes %v, or no writable /tmp", name, mounts)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 10 {
		t.Fatalf("%s: terminationGracePeriodSeconds %v is shorter than a drain", name, g)
	}
}

// internalPaths are the chart's default ingress.internalPaths: the
// SYSTEM-only operations (services/identity checks the list against
// identity's declarations).
var internalPaths = func() []string {
	raw, err := os.ReadFile(chart + "/values.yaml")
	if err != nil {
		panic(err)
	}
	var v struct {
		Ingress struct {
			InternalPaths []string `json:"internalPaths"`
		} `json:"ingress"`
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		panic(err)
	}
	return v.Ingress.InternalPaths
}()

// withInternal adds the internal paths to the routes a render must have.
func withInternal(routes map[string]string) map[string]string {
	for _, p := range internalPaths {
		routes[p] = "internal-only"
	}
	return routes
}

// internalOnly is the Service the Ingress sends internalPaths to.
const internalOnly = "nubes-internal-only"

// credentialName matches settings that hold credentials.
var credentialName = regexp.MustCompile(`^NUBES_(MONGO_URI|NATS_URL|NATS_PASSWORD|SIGNING_KEY|ENCRYPTION_KEYS|ADMIN_PASSWORD|SMTP_USERNAME|SMTP_PASSWORD|SERVICE_TOKEN|REMOTE_REPOSITORIES)$`)

// secretFiles returns the settings a container reads from the Secret's
// files (NUBES_X_FILE -> NUBES_X: key), checking that each file is a key
// of the Secret volume, mounted read-only, readable by the pod's group
// only.
func secretFiles(t *testing.T, name string, pod corev1.PodSpec, c corev1.Container, secret string) map[string]string {
	t.Helper()
	var vol *corev1.SecretVolumeSource
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			if vol != nil {
				t.Fatalf("%s: two Secret volumes", name)
			}
			vol = v.Secret
			for _, vm := range c.VolumeMounts {
				if vm.Name == v.Name && (vm.MountPath != "/etc/nubes/secrets" || !vm.ReadOnly) {
					t.Fatalf("%s: Secret mounted at %s read-only %v", name, vm.MountPath, vm.ReadOnly)
				}
			}
		}
	}
	if vol == nil || vol.SecretName != secret || vol.DefaultMode == nil || *vol.DefaultMode != 0o440 || (vol.Optional != nil && *vol.Optional) {
		t.Fatalf("%s: Secret volume %+v, want %s, mode 0440, not optional", name, vol, secret)
	}
	items := map[string]bool{}
	for _, it := range vol.Items {
		if it.Path != it.Key {
			t.Fatalf("%s: Secret key %s at %s", name, it.Key, it.Path)
		}
		items[it.Key] = true
	}
	out := map[string]string{}
	for _, e := range c.Env {
		k, ok := strings.CutSuffix(e.Name, "_FILE")
		if !ok || k == "NUBES_JWKS" {
			continue
		}
		key, ok := strings.CutPrefix(e.Value, "/etc/nubes/secrets/")
		if !ok || !items[key] {
			t.Fatalf("%s: %s = %s is not a key of the mounted Secret %v", name, e.Name, e.Value, items)
		}
		out[k] = key
		delete(items, key)
	}
	if len(items) != 0 {
		t.Fatalf("%s: Secret keys mounted but not read: %v", name, items)
	}
	return out
}

// checkNoInternalPathReachesAPod resolves every internalPath as the
// Ingress does (an Exact path before the longest Prefix) and fails when it
// reaches a Service with pods.
func checkNoInternalPathReachesAPod(t *testing.T, m *manifests) {
	t.Helper()
	for _, p := range internalPaths {
		for _, ing := range m.ingresses {
			for _, r := range ing.Spec.Rules {
				if b := resolve(r, p); b != "" && b != internalOnly {
					t.Fatalf("the Ingress sends SYSTEM-only %s to %s", p, b)
				}
			}
		}
	}
}

// resolve returns the backend Service the rule sends path to ("" none).
func resolve(r networkingv1.IngressRule, path string) string {
	best, bestLen := "", -1
	for _, p := range r.HTTP.Paths {
		switch *p.PathType {
		case networkingv1.PathTypeExact:
			if p.Path == path {
				return p.Backend.Service.Name
			}
		default:
			prefix := strings.TrimSuffix(p.Path, "/")
			if (path == prefix || strings.HasPrefix(path, prefix+"/")) && len(prefix) > bestLen {
				best, bestLen = p.Backend.Service.Name, len(prefix)
			}
		}
	}
	return best
}

func mountPaths(c corev1.Container) map[string]bool {
	out := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		out[vm.MountPath] = true
	}
	return out
}

func subset(labels, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func TestDefaultValues(t *testing.T) {
	out, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	want{services: []string{"board"}, routes: withInternal(map[string]string{"/board": "board"}),
		secret: "nubes-secrets", secretRendered: true}.check(t, m)
	s := m.secrets["nubes-secrets"]
	if s.StringData["mongo-uri"] == "" || s.StringData["nats-url"] == "" || len(s.StringData) != 2 {
		t.Fatalf("default Secret holds %v", slices.Collect(maps.Keys(s.StringData)))
	}
}

func TestProductionValues(t *testing.T) {
	out, err := render(t, chart+"/values-production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	svcs := []string{"board", "config", "cost-analysis", "dashboard", "identity", "inventory", "mailer", "monitoring", "notification", "repository", "secret"}
	want{services: svcs, autoscaled: svcs,
		routes: withInternal(map[string]string{"/board": "board", "/identity": "identity", reflectionPath: "identity", "/search": "identity",
			"/config": "config", "/dashboard": "dashboard", "/monitoring": "monitoring", "/notification": "notification",
			"/repository": "repository", "/secret": "secret", "/inventory": "inventory", "/cost-analysis": "cost-analysis"}),
		secret: "nubes-credentials"}.check(t, m)
	ing := m.ingresses["nubes"]
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.TLS) != 1 ||
		ing.Spec.Rules[0].Host != "api.nubes.example.com" {
		t.Fatalf("production Ingress: %+v", ing.Spec)
	}
	id := m.deployments["nubes-identity"].Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(id.Image, "ghcr.io/nubes-io/nubes/identity:0.1.0") {
		t.Fatalf("identity image %s", id.Image)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range id.Env {
		env[e.Name] = e
	}
	files := secretFiles(t, "identity", m.deployments["nubes-identity"].Spec.Template.Spec, id, "nubes-credentials")
	for k, key := range map[string]string{"NUBES_SIGNING_KEY": "signing-key", "NUBES_ENCRYPTION_KEYS": "encryption-keys",
		"NUBES_ADMIN_PASSWORD": "admin-password", "NUBES_MONGO_URI": "mongo-uri", "NUBES_NATS_URL": "nats-url", "NUBES_NATS_PASSWORD": "nats-password-identity"} {
		if files[k] != key {
			t.Fatalf("identity: %s not read from the Secret's %s: %v", k, key, files)
		}
	}
	if env["NUBES_NATS_USER"].Value != "nubes-identity" {
		t.Fatalf("identity NATS user %+v", env["NUBES_NATS_USER"])
	}
	// endpoint/list answers the public URL.
	if env["NUBES_ENDPOINT_URL"].Value != "https://api.nubes.example.com" {
		t.Fatalf("identity endpoint_url %+v", env["NUBES_ENDPOINT_URL"])
	}
	if env["NUBES_ADMIN_USER_ID"].Value != "admin@example.com" {
		t.Fatalf("identity env %+v", env["NUBES_ADMIN_USER_ID"])
	}
	cm := m.configMaps["nubes-config"].Data
	if cm["NUBES_JWKS_URL"] != "http://nubes-identity.nubes.svc:80/.well-known/jwks.json" || cm["NUBES_IDENTITY_URL"] != "http://nubes-identity.nubes.svc:80" {
		t.Fatalf("auth config %v", cm)
	}
	if got, want := cm["NUBES_SERVICE_URLS"], "board=http://nubes-board.nubes.svc:80,config=http://nubes-config.nubes.svc:80,cost-analysis=http://nubes-cost-analysis.nubes.svc:80,dashboard=http://nubes-dashboard.nubes.svc:80,"+
		"identity=http://nubes-identity.nubes.svc:80,inventory=http://nubes-inventory.nubes.svc:80,monitoring=http://nubes-monitoring.nubes.svc:80,notification=http://nubes-notification.nubes.svc:80,repository=http://nubes-repository.nubes.svc:80,secret=http://nubes-secret.nubes.svc:80"; got != want {
		t.Fatalf("NUBES_SERVICE_URLS = %q, want %q (every enabled service with a path)", got, want)
	}
	if hpa := m.hpas["nubes-board"]; *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 6 {
		t.Fatalf("board HPA %d-%d, want the service's own 2-6", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if hpa := m.hpas["nubes-identity"]; *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 12 {
		t.Fatalf("identity HPA %d-%d, want the defaults 3-12", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
}

// Every service of the spec enabled: each gets its prefix; the mailer,
// without a path, gets none.
func TestEveryServiceRouted(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n")
	all := []string{"mailer"}
	for s := range specPrefixes {
		all = append(all, s)
	}
	for _, s := range all {
		fmt.Fprintf(&b, "  %s: {enabled: true}\n", s)
	}
	out, err := render(t, b.String())
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{reflectionPath: "identity", "/search": "identity"}
	for s, p := range specPrefixes {
		routes[p] = s
	}
	want{services: all, routes: withInternal(routes), secret: "nubes-secrets", secretRendered: true}.check(t, decode(t, out))
}

// Per-service switches: autoscaling for one, replicas for another, no PDB
// opt-out leaking, an existing Secret, an inline JWK set, no Ingress.
func TestServiceSettings(t *testing.T) {
	out, err := render(t, `
auth:
  jwks: '{"keys": []}'
secrets:
  existingSecret: my-credentials
ingress:
  enabled: false
serviceDefaults:
  autoscaling: {enabled: true}
services:
  board: {enabled: true, replicas: 3, autoscaling: {enabled: false}}
  secret: {enabled: true}
  identity: {enabled: false}
`)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	want{services: []string{"board", "secret"}, autoscaled: []string{"secret"}, secret: "my-credentials", jwksFile: true}.check(t, m)
	if r := m.deployments["nubes-board"].Spec.Replicas; r == nil || *r != 3 {
		t.Fatalf("board replicas %v, want 3", r)
	}
	if _, ok := m.configMaps["nubes-jwks"]; !ok {
		t.Fatal("no JWKS ConfigMap")
	}
}

// values.schema.json and the templates refuse what would otherwise be
// silently ignored or deployed broken.
func TestRefusedValues(t *testing.T) {
	for name, values := range map[string]string{
		"misspelt service setting": "services:\n  board: {enabled: true, replicaz: 2}\n",
		"misspelt top-level key":   "ingres:\n  enabled: true\n",
		"replicas not a number":    "services:\n  board: {enabled: true, replicas: two}\n",
		"service without enabled":  "services:\n  newsvc: {path: /newsvc}\n",
		"bad log level":            "config:\n  logLevel: verbose\n",
		"bad duration":             "config:\n  drainDelay: 5 seconds\n",
		"path without slash":       "services:\n  board: {enabled: true, path: board}\n",
		"two services, one path":   "services:\n  inventory: {enabled: true, path: /board}\n",
		"min above max":            "services:\n  board: {enabled: true, autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 2}}\n",
		"env not NUBES_":           "config:\n  env: {PATH: /bin}\n",
		"unknown secret key":       "services:\n  board: {enabled: true, secretEnv: {NUBES_X: nope}}\n",
		"mongo URI not a URI":      "secrets:\n  mongoURI: localhost:27017\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, values); err == nil {
				t.Fatalf("helm template accepted:\n%s", values)
			}
		})
	}
}
