package server

import (
	"testing"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// The hook sees each successful Route's model, request id and decision,
// the decision the response reports; a failed Route reaches it not.
func TestDecisionHook(t *testing.T) {
	e := routeEnv(t)
	type seen struct {
		model, id, worker string
		matched, prompt   uint32
		cands             int
	}
	var got []seen
	e.srv.SetDecisionHook(func(model, id string, d *scoring.Decision) {
		got = append(got, seen{model, id, d.WorkerID, d.Matched, d.PromptBlocks, len(d.Candidates)})
	})
	var want []seen
	for _, req := range routeSequence() {
		resp, err := e.srv.Route(ctx(t), req)
		if err != nil {
			continue
		}
		want = append(want, seen{req.GetPrompt().GetModel(), req.GetRequestId(), resp.GetWorkerId(),
			resp.GetMatchedBlocks(), resp.GetPromptBlocks(), len(resp.GetCandidates())})
	}
	if len(want) < 4 || len(got) != len(want) {
		t.Fatalf("hook saw %d decisions, %d Routes succeeded", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("decision %d: hook saw %+v, Route answered %+v", i, got[i], want[i])
		}
	}
	e.srv.SetDecisionHook(nil)
	if _, err := e.srv.Route(ctx(t), &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 64)}}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatal("the hook was called after it was removed")
	}
}
