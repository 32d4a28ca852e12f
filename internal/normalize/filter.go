package normalize

import "bytes"

// Hybrid models send events per KV cache group; only main-attention groups
// describe a reusable prefix. A BlockStored naming both group_idx and
// kv_cache_spec_kind teaches the group's kind; later events naming only the
// group use what was learned. Unlearned group 0 is kept (models without
// groups), other unlearned groups are dropped.

// maxGroups bounds the learned KV cache groups (the index comes off the wire).
const maxGroups = 1024

type kindClass uint8

const (
	kindMain kindClass = iota
	kindNonMain
	kindUnknown
)

var (
	mainKinds    = []string{"full_attention", "mla_attention", "sink_full_attention"}
	nonMainKinds = []string{"sliding_window", "sliding_window_mla", "mamba", "chunked_local_attention",
		"encoder_only_attention", "cross_attention"}
)

// classify returns the class of a kv_cache_spec_kind, in any case.
func classify(kind []byte) kindClass {
	for _, k := range mainKinds {
		if bytes.EqualFold(kind, []byte(k)) {
			return kindMain
		}
	}
	for _, k := range nonMainKinds {
		if bytes.EqualFold(kind, []byte(k)) {
			return kindNonMain
		}
	}
	return kindUnknown
}

// filter returns the reason to drop an event by its group metadata or
// locality, if any.
func (n *Normalizer) filter(ev *rawEvent) (Reason, bool) {
	if ev.HasKind {
		switch classify(ev.SpecKind) {
		case kindMain:
		case kindUnknown:
			return reasonUnknownKind, true
		default:
			return reasonNonMainAttentionKind, true
		}
	} else if ev.HasGroup {
		if c, ok := n.groups[ev.Group]; ok {
			switch c {
			case kindUnknown:
				return reasonUnknownKind, true
			case kindNonMain:
				return reasonNonMainAttentionGroup, true
			}
		} else if ev.Group != 0 {
			return reasonUnlearnedGroup, true
		}
	}
	if bytes.EqualFold(ev.Locality, []byte("REMOTE")) {
		return reasonRemoteLocality, true
	}
	return 0, false
}

// learn records the kind of the group a store names with both.
func (n *Normalizer) learn(ev *rawEvent) {
	if !ev.HasGroup || !ev.HasKind {
		return
	}
	if _, ok := n.groups[ev.Group]; !ok && len(n.groups) >= maxGroups {
		n.warn(int(reasonUnlearnedGroup), "too many KV cache groups; not learning", "group_idx", ev.Group)
		return
	}
	n.groups[ev.Group] = classify(ev.SpecKind)
}
