package discovery

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// The client-go fake clientset stands in for an API server, which cannot
// run here; the informers list and watch it as they would a real one.

const ns = "llm"

func pod(name, ip string, ready bool, labels, annotations map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

var engineLabels = map[string]string{"app": "vllm"}

func TestPodWorker(t *testing.T) {
	d := DefaultDefaults()
	d.Model = "llama"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // endpoint events replay dp model, or the error
	}{
		{"defaults", pod("a", "10.0.0.1", true, nil, nil), "10.0.0.1:8000 tcp://10.0.0.1:5557 tcp://10.0.0.1:5558 1 llama"},
		{"annotated", pod("a", "10.0.0.1", true, map[string]string{AnnotationModel: "qwen"},
			map[string]string{AnnotationDPSize: "4", AnnotationPort: "9000", AnnotationKVEventsPort: "6000"}),
			"10.0.0.1:9000 tcp://10.0.0.1:6000 tcp://10.0.0.1:6004 4 qwen"},
		{"no replay", pod("a", "10.0.0.1", true, nil, map[string]string{AnnotationReplayPort: "none"}),
			"10.0.0.1:8000 tcp://10.0.0.1:5557  1 llama"},
		{"no events", pod("a", "10.0.0.1", true, nil, map[string]string{AnnotationKVEventsPort: "none"}),
			"10.0.0.1:8000   1 llama"},
		{"ipv6", pod("a", "fd00::1", true, nil, nil), "[fd00::1]:8000 tcp://[fd00::1]:5557 tcp://[fd00::1]:5558 1 llama"},
		{"bad port", pod("a", "10.0.0.1", true, nil, map[string]string{AnnotationPort: "80000"}),
			`bad discovery annotation: pod a: kvrouter.io/port "80000": want a number in 0..65535 or none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := PodWorker(tc.pod, d, nil)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = w.Endpoint + " " + w.KvEventsEndpoint + " " + w.ReplayEndpoint + " " + itoa(w.DpSize) + " " + w.Model
			}
			if got != tc.want {
				t.Fatalf("got %q; want %q", got, tc.want)
			}
		})
	}
	if _, err := PodWorker(pod("a", "1.2.3.4", true, nil, nil), DefaultDefaults(), nil); err == nil {
		t.Fatal("a pod without a model: no error")
	}
}

func itoa(n uint32) string { return strconv.Itoa(int(n)) }

// Pods selected by label become workers when ready and leave when not
// ready or deleted; one that comes back, with a new IP, returns under the
// same id.
func TestKubePods(t *testing.T) {
	client := fake.NewClientset(pod("vllm-0", "10.0.0.1", true, engineLabels, nil),
		pod("vllm-1", "10.0.0.2", false, engineLabels, nil),
		pod("other", "10.0.0.9", true, map[string]string{"app": "db"}, nil))
	d := DefaultDefaults()
	d.Model = "llama"
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(KubeConfig{Client: client, Namespace: ns, Selector: "app=vllm", Defaults: d, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := newMemRegistry()
	results := runSyncer(t, ctx, reg, k)
	waitRegistry(t, results, reg, "vllm-0=10.0.0.1:8000(discovery)")

	pods := client.CoreV1().Pods(ns)
	update := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(pod("vllm-1", "10.0.0.2", true, engineLabels, nil))
	waitRegistry(t, results, reg, "vllm-0=10.0.0.1:8000(discovery) vllm-1=10.0.0.2:8000(discovery)")
	update(pod("vllm-0", "10.0.0.1", false, engineLabels, nil))
	waitRegistry(t, results, reg, "vllm-1=10.0.0.2:8000(discovery)")
	// The pod restarts: deleted, recreated by its StatefulSet with a new IP.
	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("vllm-0", "10.0.0.7", true, engineLabels, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, results, reg, "vllm-0=10.0.0.7:8000(discovery) vllm-1=10.0.0.2:8000(discovery)")
	if err := pods.Delete(ctx, "vllm-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, results, reg, "vllm-0=10.0.0.7:8000(discovery)")
	if w, s := testutil.ToFloat64(m.workers.WithLabelValues("kubernetes")), testutil.ToFloat64(m.skipped.WithLabelValues("kubernetes")); w != 1 || s != 0 {
		t.Fatalf("workers %v skipped %v; want 1 and 0", w, s)
	}

	// A ready pod whose annotations do not parse is left out and counted;
	// fixed, it joins and the count drops.
	bad := map[string]string{AnnotationPort: "80000"}
	if _, err := pods.Create(ctx, pod("vllm-2", "10.0.0.3", true, engineLabels, bad), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bad pod counted as skipped", func() bool {
		return testutil.ToFloat64(m.skipped.WithLabelValues("kubernetes")) == 1
	})
	if got := reg.String(); got != "vllm-0=10.0.0.7:8000(discovery)" {
		t.Fatalf("registry %q with a bad pod; want it unchanged", got)
	}
	update(pod("vllm-2", "10.0.0.3", true, engineLabels, nil))
	waitRegistry(t, results, reg, "vllm-0=10.0.0.7:8000(discovery) vllm-2=10.0.0.3:8000(discovery)")
	if s := testutil.ToFloat64(m.skipped.WithLabelValues("kubernetes")); s != 0 {
		t.Fatalf("skipped %v after the fix; want 0", s)
	}
}

func inferencePool(ports ...int64) *unstructured.Unstructured {
	var tp []any
	for _, p := range ports {
		tp = append(tp, map[string]any{"number": p})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts":       tp,
			"endpointPickerRef": map[string]any{"name": "epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

// An InferencePool's selector picks the pods and its target ports are the
// ranks: a change of the pool changes the workers.
func TestKubeInferencePool(t *testing.T) {
	client := fake.NewClientset(pod("vllm-0", "10.0.0.1", true, engineLabels, nil),
		pod("other", "10.0.0.9", true, map[string]string{"app": "db"}, nil))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList"}, inferencePool(8000, 8001))
	d := DefaultDefaults()
	d.Model = "llama"
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(KubeConfig{Client: client, Dynamic: dyn, Namespace: ns, Pool: "pool", Defaults: d, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := newMemRegistry()
	results := runSyncer(t, ctx, reg, k)
	waitRegistry(t, results, reg, "vllm-0=10.0.0.1:8000(discovery)")
	w := reg.List("")[0].Worker
	if w.DpSize != 2 || w.ReplayEndpoint != "tcp://10.0.0.1:5559" {
		t.Fatalf("worker %v; want dp_size 2 (two target ports), replay at 5557+2", w)
	}
	if _, err := dyn.Resource(InferencePoolGVR).Namespace(ns).Update(ctx, inferencePool(9000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, results, reg, "vllm-0=10.0.0.1:9000(discovery)")

	// The pool deleted: each look fails and is counted, and the last
	// report stands rather than every worker leaving.
	if err := dyn.Resource(InferencePoolGVR).Namespace(ns).Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a failed look counted after the pool was deleted", func() bool {
		return testutil.ToFloat64(m.failures.WithLabelValues("kubernetes")) > 0
	})
	if got := reg.String(); got != "vllm-0=10.0.0.1:9000(discovery)" {
		t.Fatalf("registry %q without the pool; want the last report to stand", got)
	}
}

func TestParsePool(t *testing.T) {
	p, err := ParsePool(inferencePool(8000, 8002))
	if err != nil {
		t.Fatalf("non-consecutive ports: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-0"}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
	w, err := PodWorker(pod, Defaults{Model: "m", Port: 8000, KVEventsPort: 5557}, p)
	if err != nil || w.DpSize != 2 || !slices.Equal(w.RankEndpoints, []string{"10.0.0.1:8000", "10.0.0.1:8002"}) {
		t.Fatalf("non-consecutive ports: %v %v; want rank_endpoints 8000 and 8002", w, err)
	}
	if err := fleet.Validate(w); err != nil {
		t.Fatalf("the fleet refuses it: %v", err)
	}
	if _, err := ParsePool(inferencePool()); !errors.Is(err, ErrPool) {
		t.Fatalf("no ports: %v; want ErrPool", err)
	}
	u := inferencePool(8000)
	unstructured.RemoveNestedField(u.Object, "spec", "selector")
	if _, err := ParsePool(u); !errors.Is(err, ErrPool) {
		t.Fatalf("no selector: %v; want ErrPool", err)
	}
}
