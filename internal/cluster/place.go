package cluster

import "time"

// Place is this replica's place among the replicas deciding beside it
// (itself and those a Route of which arrived within routingWindow, ordered
// by replica id) and their number: the scoring Router's Config.Place, by
// which replicas deciding one burst on the same state break near-ties
// apart. A replica that routes nothing (a standby, or every Route sent to
// one replica) is not counted, so the replica that decides alone breaks no
// tie toward a share of the fleet. The replica deciding for the cluster
// (decide.go) decides as one router: the Routes it decides are the
// fleet's, and a replica that decided a few itself when it could not reach
// it must not turn all of them toward a share of the ranks for a minute.
func (n *Node) Place() (place, replicas int) {
	s := &n.sync
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.decide.serving.Load() && s.trk.decider(n.cfg.ReplicaID, n.epoch, now, n.liveWindow()) == n.cfg.ReplicaID {
		return 0, 1
	}
	return s.trk.routingPlace(n.cfg.ReplicaID, now, routingWindow)
}

// routingWindow is how long a replica counts as deciding beside this one
// after its last Route arrived: long against the sync lag and the gaps
// between a fleet's bursts, so that the replicas' owners stay put across
// them (the first requests of a burst after a quiet spell still diverge),
// short enough that a replica left alone, or sent every Route, stops
// yielding near-ties to replicas that stopped routing within a minute.
const routingWindow = time.Minute
