package cluster

import "testing"

func TestPlaceOf(t *testing.T) {
	for _, tc := range []struct {
		self            string
		ids             []string
		place, replicas int
	}{
		{self: "r1", ids: nil, place: 0, replicas: 1},
		{self: "r1", ids: []string{"r2", "r3"}, place: 0, replicas: 3},
		{self: "r2", ids: []string{"r1", "r3"}, place: 1, replicas: 3},
		{self: "r3", ids: []string{"r1", "r2"}, place: 2, replicas: 3},
		{self: "r2", ids: []string{"r1", "r2"}, place: 1, replicas: 2}, // (a twin under its id)
	} {
		place, n := placeOf(tc.self, tc.ids)
		if place != tc.place || n != tc.replicas {
			t.Errorf("placeOf(%q, %v) = %d of %d, want %d of %d", tc.self, tc.ids, place, n, tc.place, tc.replicas)
		}
	}
}
