package epp

import (
	"testing"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

func TestRankEndpoint(t *testing.T) {
	w := &kvrouterv1.Worker{Endpoint: "10.0.0.1:8000", DpSize: 4}
	explicit := &kvrouterv1.Worker{Endpoint: "10.0.0.2:9000", DpSize: 2,
		RankEndpoints: []string{"10.0.0.2:9000", "http://10.0.0.3:7000/v1"}}
	for _, tc := range []struct {
		w    *kvrouterv1.Worker
		rank uint32
		want string
	}{
		{w, 0, "10.0.0.1:8000"},
		{w, 3, "10.0.0.1:8003"},
		{explicit, 1, "10.0.0.3:7000"},
		{&kvrouterv1.Worker{Endpoint: "http://[fd00::1]:8000/v1"}, 1, "[fd00::1]:8001"},
		{&kvrouterv1.Worker{Endpoint: "10.0.0.1:65535"}, 1, ""},
		{&kvrouterv1.Worker{Endpoint: "no-port"}, 1, ""},
		{&kvrouterv1.Worker{}, 0, ""},
	} {
		if got := rankEndpoint(tc.w, tc.rank); got != tc.want {
			t.Errorf("rankEndpoint(%v, %d) = %q, want %q", tc.w, tc.rank, got, tc.want)
		}
	}
}

func TestSubset(t *testing.T) {
	s, ok := parseSubset([]string{"10.0.0.1:8000, 10.0.0.2", "", "[fd00::1]"})
	if !ok {
		t.Fatal("no entries")
	}
	for ep, want := range map[string]bool{
		"10.0.0.1:8000": true, "10.0.0.1:8001": false, "10.0.0.2:1": true,
		"[fd00::1]:80": true, "10.0.0.3:8000": false, "junk": false,
	} {
		if got := s.allows(ep); got != want {
			t.Errorf("allows(%q) = %v, want %v", ep, got, want)
		}
	}
	if _, ok := parseSubset([]string{" , "}); ok {
		t.Error("a hint of empty entries parsed as a subset")
	}
	var none *subset
	if !none.allows("1.2.3.4:5") {
		t.Error("no subset refused an endpoint")
	}
}
