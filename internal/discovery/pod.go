package discovery

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Pod annotations (or labels, for model and dp-size) that describe an
// engine; each overrides the discoverer's default.
const (
	AnnotationWorkerID     = "kvrouter.io/worker-id"      // default: the pod's name
	AnnotationModel        = "kvrouter.io/model"          // annotation or label
	AnnotationDPSize       = "kvrouter.io/dp-size"        // annotation or label
	AnnotationPort         = "kvrouter.io/port"           // serving port
	AnnotationKVEventsPort = "kvrouter.io/kv-events-port" // rank 0's ZMQ PUB port; "none": no events
	AnnotationReplayPort   = "kvrouter.io/replay-port"    // rank 0's replay port; "none": no replay
	AnnotationBlockSize    = "kvrouter.io/block-size"
	AnnotationTopic        = "kvrouter.io/topic"
)

// ErrAnnotation: a pod's annotation or label does not parse; the message
// names the pod and the key.
var ErrAnnotation = errors.New("bad discovery annotation")

// Defaults are what a discovered engine is when its pod or record does not
// say otherwise.
type Defaults struct {
	Model string `yaml:"model"`
	// Port is the serving port (the gateway's endpoint).
	Port int `yaml:"port"`
	// KVEventsPort is rank 0's ZMQ PUB port (vLLM's default 5557; 0: no
	// events). The replay port is dp_size above it, as vLLM's
	// replay_endpoint examples place it, unless ReplayOff.
	KVEventsPort int    `yaml:"kv_events_port"`
	ReplayOff    bool   `yaml:"replay_off"`
	DPSize       uint32 `yaml:"dp_size"`
	BlockSize    uint32 `yaml:"block_size"`
	Topic        string `yaml:"topic"`
}

// DefaultDefaults are vLLM's: serving on 8000, events on 5557.
func DefaultDefaults() Defaults { return Defaults{Port: 8000, KVEventsPort: 5557, DPSize: 1} }

// Validate names the field at fault.
func (d Defaults) Validate() error {
	switch {
	case d.Port <= 0 || d.Port > 65535:
		return fmt.Errorf("port %d: want 1..65535", d.Port)
	case d.KVEventsPort < 0 || d.KVEventsPort > 65535:
		return fmt.Errorf("kv_events_port %d: want 0..65535 (0: no events)", d.KVEventsPort)
	}
	return nil
}

// PodReady reports whether pod serves: not being deleted, with an IP, and
// its Ready condition true. A pod that is not ready is not a worker.
func PodReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodWorker is the worker of a ready pod, its fields from the pod's
// annotations over d. With pool set, the pool's target ports are the
// ranks' serving ports (rank r at ports[r]; listed in rank_endpoints
// unless they are consecutive).
func PodWorker(pod *corev1.Pod, d Defaults, pool *Pool) (*kvrouterv1.Worker, error) {
	a := podAnnotations{pod: pod}
	w := &kvrouterv1.Worker{WorkerId: pod.Name, Model: d.Model, DpSize: d.DPSize, BlockSize: d.BlockSize, Topic: d.Topic}
	if v := a.get(AnnotationWorkerID, false); v != "" {
		w.WorkerId = v
	}
	if v := a.get(AnnotationModel, true); v != "" {
		w.Model = v
	}
	if v := a.get(AnnotationTopic, false); v != "" {
		w.Topic = v
	}
	port, events, replay := d.Port, d.KVEventsPort, -1
	if d.ReplayOff {
		replay = 0
	}
	var err error
	for key, dst := range map[string]*int{AnnotationPort: &port, AnnotationKVEventsPort: &events, AnnotationReplayPort: &replay} {
		if err = a.int(key, false, dst, 65535); err != nil {
			return nil, err
		}
	}
	n := int(w.DpSize)
	if err = a.int(AnnotationDPSize, true, &n, kv.MaxDPSize); err != nil {
		return nil, err
	}
	bs := int(w.BlockSize)
	if err = a.int(AnnotationBlockSize, false, &bs, 1<<20); err != nil {
		return nil, err
	}
	w.DpSize, w.BlockSize = uint32(max(n, 1)), uint32(bs)
	if pool != nil {
		port = pool.TargetPorts[0]
		w.DpSize = uint32(len(pool.TargetPorts))
	}
	if w.Model == "" {
		return nil, fmt.Errorf("%w: pod %s has no model (annotation or label %s, or the discoverer's model)", ErrAnnotation, pod.Name, AnnotationModel)
	}
	ip := pod.Status.PodIP
	w.Endpoint = net.JoinHostPort(ip, strconv.Itoa(port))
	if pool != nil && !pool.consecutive() {
		for _, p := range pool.TargetPorts {
			w.RankEndpoints = append(w.RankEndpoints, net.JoinHostPort(ip, strconv.Itoa(p)))
		}
	}
	if events > 0 {
		w.KvEventsEndpoint = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(events))
		if replay < 0 {
			replay = events + int(w.DpSize)
		}
		if replay > 0 && replay <= 65535 {
			w.ReplayEndpoint = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(replay))
		}
	}
	// Annotations that parse one by one can still combine into a worker
	// the fleet refuses (events port + dp size past 65535, a blank
	// name); that is the pod's annotation error, said here.
	if err := fleet.Validate(w); err != nil {
		return nil, fmt.Errorf("%w: pod %s: %w", ErrAnnotation, pod.Name, err)
	}
	return w, nil
}

// podAnnotations reads a pod's annotations, and for some keys its labels.
type podAnnotations struct{ pod *corev1.Pod }

func (a podAnnotations) get(key string, label bool) string {
	if v, ok := a.pod.Annotations[key]; ok {
		return v
	}
	if label {
		return a.pod.Labels[key]
	}
	return ""
}

// int reads key into dst if set: a number in 0..max, or "none" as 0.
func (a podAnnotations) int(key string, label bool, dst *int, maxV int) error {
	v := a.get(key, label)
	switch v {
	case "":
		return nil
	case "none":
		*dst = 0
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxV {
		return fmt.Errorf("%w: pod %s: %s %q: want a number in 0..%d or none", ErrAnnotation, a.pod.Name, key, v, maxV)
	}
	*dst = n
	return nil
}
