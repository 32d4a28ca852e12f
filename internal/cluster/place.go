package cluster

import "slices"

// Place is this replica's place among the replicas it hears from (itself
// included, ordered by replica id) and their number: the scoring Router's
// Config.Place, by which replicas deciding one burst on the same state
// order their choices apart. A replica that stopped counts until the
// tracker forgets it (originIdle).
func (n *Node) Place() (place, replicas int) {
	s := &n.sync
	s.mu.Lock()
	ids := s.trk.known()
	s.mu.Unlock()
	return placeOf(n.cfg.ReplicaID, ids)
}

// placeOf is self's place among the sorted ids and itself, and their number.
func placeOf(self string, ids []string) (place, replicas int) {
	place, found := slices.BinarySearch(ids, self)
	replicas = len(ids)
	if !found {
		replicas++
	}
	return place, replicas
}
