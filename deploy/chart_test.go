package deploy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/app"
)

// The chart is rendered with the Helm Go SDK (what `helm template` runs);
// no cluster can run here, so the rendered objects are decoded strictly
// into the Kubernetes API types and asserted, and the rendered config.yaml
// is loaded with the router's own config loader.

const chartDir = "helm/kvrouter"

// rendered is one render: the objects by kind and name.
type rendered map[string]string

func render(t *testing.T, values string) (rendered, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: "kv", Namespace: "serving", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, err
	}
	out := rendered{}
	for name, body := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(body, "\n---") {
			var meta struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			if meta.Kind != "" {
				out[meta.Kind+"/"+meta.Metadata.Name] = doc
			}
		}
	}
	return out, nil
}

func mustRender(t *testing.T, values string) rendered {
	t.Helper()
	r, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decode decodes the object strictly into v: a field the API type does not
// have is an error.
func (r rendered) decode(t *testing.T, key string, v any) {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		t.Fatalf("no %s rendered; have %v", key, r.keys())
	}
	if err := sigsyaml.UnmarshalStrict([]byte(doc), v); err != nil {
		t.Fatalf("%s: %v\n%s", key, err, doc)
	}
}

func (r rendered) keys() []string {
	var k []string
	for key := range r {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// config loads the rendered config.yaml as the router does.
func (r rendered) config(t *testing.T) app.Config {
	t.Helper()
	var cm corev1.ConfigMap
	r.decode(t, "ConfigMap/kv-kvrouter", &cm)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	if err := cfg.ReadFile(path); err != nil {
		t.Fatalf("rendered config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("rendered config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	return cfg
}

func container(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Containers))
	}
	return spec.Containers[0]
}

// checkPod: non-root, read-only root, no privilege, config mounted, the
// metrics port reachable from the kubelet and Prometheus.
func checkPod(t *testing.T, spec corev1.PodSpec, cfg app.Config) corev1.Container {
	t.Helper()
	c := container(t, spec)
	sc := c.SecurityContext
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Fatalf("security contexts %+v %+v: want non-root, read-only root, no privilege escalation", spec.SecurityContext, sc)
	}
	if cfg.HTTPAddr != ":9090" || cfg.GRPCAddr != ":50051" {
		t.Fatalf("config addresses %q %q: want :9090 and :50051 (not loopback: the kubelet probes the pod IP)", cfg.HTTPAddr, cfg.GRPCAddr)
	}
	if !slices.Contains(c.Args, "--config=/etc/kvrouter/config.yaml") {
		t.Fatalf("args %v: no --config", c.Args)
	}
	return c
}

// Defaults: a StatefulSet whose state dir is a volume claim, gRPC
// readiness, no discovery RBAC, no Prometheus Operator objects.
func TestChartDefaults(t *testing.T) {
	r := mustRender(t, "")
	cfg := r.config(t)
	var ss appsv1.StatefulSet
	r.decode(t, "StatefulSet/kv-kvrouter", &ss)
	c := checkPod(t, ss.Spec.Template.Spec, cfg)
	if cfg.Persist.StateDir != "/var/lib/kvrouter" || len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "state" {
		t.Fatalf("state dir %q, claims %v: want /var/lib/kvrouter on the claim state", cfg.Persist.StateDir, ss.Spec.VolumeClaimTemplates)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "state" && m.MountPath == "/var/lib/kvrouter" }) {
		t.Fatalf("mounts %v: the state claim is not at the state dir", c.VolumeMounts)
	}
	if p := c.ReadinessProbe; p == nil || p.GRPC == nil || p.GRPC.Port != 50051 {
		t.Fatalf("readiness %+v: want the gRPC health probe on 50051", p)
	}
	for _, k := range []string{"Role/kv-kvrouter-discovery", "ServiceMonitor/kv-kvrouter", "PrometheusRule/kv-kvrouter", "Deployment/kv-kvrouter"} {
		if _, ok := r[k]; ok {
			t.Errorf("%s rendered by default", k)
		}
	}
	if cfg.Discovery.Enabled() || cfg.Cluster.Enabled() {
		t.Fatal("discovery or cluster mode on by default")
	}
}

// NATS replicas with the state dir off: a Deployment keeping nothing, the
// NATS settings and credentials in the config.
func TestChartNATSDeployment(t *testing.T) {
	r := mustRender(t, "replicas: 3\npersistence: {enabled: false}\nnats: {url: nats://nats:4222, credsSecret: nats-creds, streamReplicas: 3}\n")
	cfg := r.config(t)
	var d appsv1.Deployment
	r.decode(t, "Deployment/kv-kvrouter", &d)
	checkPod(t, d.Spec.Template.Spec, cfg)
	if _, ok := r["StatefulSet/kv-kvrouter"]; ok {
		t.Fatal("a StatefulSet beside the Deployment")
	}
	n := cfg.Cluster.NATS
	if *d.Spec.Replicas != 3 || cfg.Persist.StateDir != "none" || n.URL != "nats://nats:4222" || n.Replicas != 3 || n.CredsFile != "/etc/kvrouter/nats/creds" {
		t.Fatalf("replicas %d, state dir %q, nats %+v", *d.Spec.Replicas, cfg.Persist.StateDir, n)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "nats-creds" }) {
		t.Fatal("the NATS credentials Secret is not mounted")
	}
}

// Kubernetes discovery by InferencePool: the config names it, and a Role
// in the engines' namespace lets the router watch pods and read pools.
func TestChartDiscovery(t *testing.T) {
	r := mustRender(t, "discovery:\n  model: llama\n  kubernetes: {enabled: true, namespace: engines, inferencePool: vllm-pool}\n")
	cfg := r.config(t)
	k := cfg.Discovery.Kubernetes
	if !k.Enabled || k.Namespace != "engines" || k.InferencePool != "vllm-pool" || cfg.Discovery.Model != "llama" || cfg.Discovery.KVEventsPort != 5557 {
		t.Fatalf("discovery config %+v", cfg.Discovery)
	}
	var role rbacv1.Role
	r.decode(t, "Role/kv-kvrouter-discovery", &role)
	var rb rbacv1.RoleBinding
	r.decode(t, "RoleBinding/kv-kvrouter-discovery", &rb)
	if role.Namespace != "engines" || rb.Namespace != "engines" || rb.Subjects[0].Name != "kv-kvrouter" || rb.Subjects[0].Namespace != "serving" {
		t.Fatalf("role in %q, binding in %q to %+v", role.Namespace, rb.Namespace, rb.Subjects)
	}
	var got []string
	for _, rule := range role.Rules {
		for _, res := range rule.Resources {
			got = append(got, res+":"+strings.Join(rule.Verbs, ","))
		}
	}
	if strings.Join(got, " ") != "pods:get,list,watch inferencepools:get,list,watch" {
		t.Fatalf("role rules %v", got)
	}
	var ss appsv1.StatefulSet
	r.decode(t, "StatefulSet/kv-kvrouter", &ss)
	if a := ss.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Fatal("the service account token is not mounted: discovery cannot reach the API server")
	}
}

// TLS and tokens: the Secrets are mounted where the config reads them,
// and readiness moves to /healthz (the kubelet's gRPC probe has no TLS).
func TestChartTLSTokens(t *testing.T) {
	r := mustRender(t, "tls: {secretName: kv-tls, clientAuth: true}\ntokens: {secretName: kv-tokens}\n")
	var cm corev1.ConfigMap
	r.decode(t, "ConfigMap/kv-kvrouter", &cm)
	var cfg app.Config
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	a := cfg.Access
	if a.TLSCert != "/etc/kvrouter/tls/tls.crt" || a.TLSKey != "/etc/kvrouter/tls/tls.key" || a.TLSClientCA != "/etc/kvrouter/tls/ca.crt" ||
		a.RouterTokensFile != "/etc/kvrouter/tokens/router-tokens" || a.RegistryTokensFile != "/etc/kvrouter/tokens/registry-tokens" {
		t.Fatalf("access config %+v", a)
	}
	var ss appsv1.StatefulSet
	r.decode(t, "StatefulSet/kv-kvrouter", &ss)
	c := container(t, ss.Spec.Template.Spec)
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
		t.Fatalf("readiness %+v: want /healthz on the metrics port", p)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["tls"] != "/etc/kvrouter/tls" || mounts["tokens"] != "/etc/kvrouter/tokens" {
		t.Fatalf("mounts %v", mounts)
	}
}

// The PrometheusRule carries deploy/prometheus/rules.yaml's groups, from
// the chart's copy, which must equal it.
func TestChartPrometheusRule(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(chartDir, "files/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, cp) {
		t.Fatalf("%s/files/rules.yaml differs from %s: cp %s %s/files/", chartDir, rulesFile, rulesFile, chartDir)
	}
	r := mustRender(t, "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true, labels: {release: prom}}\n")
	var pr struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct{ Groups []any }
	}
	if err := yaml.Unmarshal([]byte(r["PrometheusRule/kv-kvrouter"]), &pr); err != nil {
		t.Fatal(err)
	}
	var want struct{ Groups []any }
	if err := yaml.Unmarshal(src, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Groups) == 0 || !equalYAML(pr.Spec.Groups, want.Groups) || pr.Metadata.Labels["release"] != "prom" {
		t.Fatalf("PrometheusRule labels %v, groups:\n%v\nwant the rules file's", pr.Metadata.Labels, pr.Spec.Groups)
	}
	if !strings.Contains(r["ServiceMonitor/kv-kvrouter"], "port: metrics") {
		t.Fatalf("ServiceMonitor does not scrape the metrics port:\n%s", r["ServiceMonitor/kv-kvrouter"])
	}
}

func equalYAML(a, b any) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return bytes.Equal(x, y)
}

// Values the chart refuses, with a message naming them.
func TestChartRefuses(t *testing.T) {
	for values, want := range map[string]string{
		"replicas: 2\n": "replicas > 1 needs nats.url",
		"discovery: {kubernetes: {enabled: true}}": "discovery.kubernetes.enabled needs",
		"discovery: {dns: {name: vllm}}":           "discovery.dns.name needs discovery.model",
	} {
		if _, err := render(t, values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: %v; want an error containing %q", values, err, want)
		}
	}
}

// helm lint, through the SDK, for the main value combinations.
func TestChartLint(t *testing.T) {
	for _, values := range []string{"", "persistence: {enabled: false}\nnats: {url: nats://n:4222}\nreplicas: 2\n",
		"discovery: {model: m, kubernetes: {enabled: true, selector: app=vllm}, dns: {name: vllm.engines.svc}}\nserviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n"} {
		vals := map[string]any{}
		if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
			t.Fatal(err)
		}
		l := lint.All(chartDir, vals, "serving", false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("lint (values %q): %s", values, m)
			}
		}
	}
}
