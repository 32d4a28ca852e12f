package discovery

import (
	"sort"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Changes is what makes the registry's discovered workers the desired
// ones: workers to register or replace, ids to unregister. Both sorted by
// worker id.
type Changes struct {
	Upsert []*kvrouterv1.Worker
	Remove []string
}

// Empty reports whether c changes nothing.
func (c Changes) Empty() bool { return len(c.Upsert) == 0 && len(c.Remove) == 0 }

// Diff compares desired with registered (both by worker id): a desired
// worker not registered, or registered with other fields, is upserted; a
// registered one not desired is removed only when complete: a syncer
// passes false until every source reported once, since a source not heard
// from yet must not have its workers removed.
func Diff(desired, registered map[string]*kvrouterv1.Worker, complete bool) Changes {
	var c Changes
	for id, w := range desired {
		if cur, ok := registered[id]; !ok || !proto.Equal(normalized(cur), normalized(w)) {
			c.Upsert = append(c.Upsert, w)
		}
	}
	if complete {
		for id := range registered {
			if _, ok := desired[id]; !ok {
				c.Remove = append(c.Remove, id)
			}
		}
	}
	sort.Slice(c.Upsert, func(i, j int) bool { return c.Upsert[i].WorkerId < c.Upsert[j].WorkerId })
	sort.Strings(c.Remove)
	return c
}

// normalized is w with the fields the fleet keeps, dp_size 0 as 1, so that
// a registration equals the discovered worker it came from.
func normalized(w *kvrouterv1.Worker) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{
		WorkerId: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KvEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: max(w.DpSize, 1), BlockSize: w.BlockSize, Topic: w.Topic,
	}
}
