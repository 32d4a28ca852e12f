package discovery

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	if _, err := p.rankPorts(); err != nil {
		return nil, err
	}
	return p, nil
}

// Selects reports whether the pool selects a pod with podLabels.
func (p *Pool) Selects(podLabels map[string]string) bool {
	return labels.SelectorFromSet(p.MatchLabels).Matches(labels.Set(podLabels))
}

// rankPorts returns rank 0's port: a worker's ranks are at its port plus
// the rank, so the pool's target ports must be consecutive.
func (p *Pool) rankPorts() (int, error) {
	for i, port := range p.TargetPorts {
		if port != p.TargetPorts[0]+i {
			return 0, fmt.Errorf("%w %s: spec.targetPorts %v are not consecutive: rank r is served at the first port plus r", ErrPool, p.Name, p.TargetPorts)
		}
	}
	return p.TargetPorts[0], nil
}
