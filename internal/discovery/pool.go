package discovery

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// InferencePoolGVR is the Gateway API Inference Extension's InferencePool,
// v1. It is read as unstructured data: its selector and target ports are
// the two fields used, and a typed client would be a dependency for them.
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// ErrPool: an InferencePool's spec cannot be used; the message names the
// field.
var ErrPool = errors.New("unusable InferencePool")

// Pool is what discovery reads of an InferencePool: the pods it selects
// and their target ports, one per data-parallel rank.
type Pool struct {
	Name        string
	MatchLabels map[string]string
	TargetPorts []int
}

// ParsePool reads spec.selector.matchLabels and spec.targetPorts[].number.
func ParsePool(u *unstructured.Unstructured) (*Pool, error) {
	p := &Pool{Name: u.GetName()}
	ml, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return nil, fmt.Errorf("%w %s: spec.selector.matchLabels: %v", ErrPool, p.Name, err)
	}
	if !found || len(ml) == 0 {
		return nil, fmt.Errorf("%w %s: spec.selector.matchLabels is empty (it would select every pod)", ErrPool, p.Name)
	}
	p.MatchLabels = ml
	ports, _, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil {
		return nil, fmt.Errorf("%w %s: spec.targetPorts: %v", ErrPool, p.Name, err)
	}
	for i, tp := range ports {
		m, ok := tp.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w %s: spec.targetPorts[%d] is not an object", ErrPool, p.Name, i)
		}
		n, ok, err := unstructured.NestedInt64(m, "number")
		if err != nil || !ok || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w %s: spec.targetPorts[%d].number: want 1..65535", ErrPool, p.Name, i)
		}
		p.TargetPorts = append(p.TargetPorts, int(n))
	}
	if len(p.TargetPorts) == 0 {
		return nil, fmt.Errorf("%w %s: spec.targetPorts is empty", ErrPool, p.Name)
	}
	if len(p.TargetPorts) > kv.MaxDPSize {
		return nil, fmt.Errorf("%w %s: %d target ports, over the %d ranks a worker may have", ErrPool, p.Name, len(p.TargetPorts), kv.MaxDPSize)
	}
	return p, nil
}

// Selects reports whether the pool selects a pod with podLabels.
func (p *Pool) Selects(podLabels map[string]string) bool {
	return labels.SelectorFromSet(p.MatchLabels).Matches(labels.Set(podLabels))
}

// consecutive reports whether the pool's target ports are rank 0's port
// plus the rank, as a worker's endpoint implies; other ports are listed
// rank by rank (Worker.rank_endpoints).
func (p *Pool) consecutive() bool {
	for i, port := range p.TargetPorts {
		if port != p.TargetPorts[0]+i {
			return false
		}
	}
	return true
}
