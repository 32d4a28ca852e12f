package epp

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// referencePrompt is promptOf by encoding/json alone.
func referencePrompt(path string, body []byte) (*kvrouterv1.Prompt, error) {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" {
		return nil, ErrBadRequest
	}
	p := &kvrouterv1.Prompt{Model: req.Model}
	raw := bytes.TrimSpace(req.Prompt)
	if isCompletions(path) && len(raw) > 0 && raw[0] == '[' {
		if inner := bytes.TrimSpace(raw[1:]); len(inner) > 0 && inner[0] == '"' {
			p.OpenaiBody = body // a list of texts
			return p, nil
		}
		var ids []uint32
		var lists [][]uint32
		switch {
		case json.Unmarshal(raw, &ids) == nil:
			if len(ids) == 0 {
				return nil, ErrBadRequest
			}
			p.TokenIds = ids
		case json.Unmarshal(raw, &lists) == nil:
			if len(lists) == 0 || len(lists[0]) == 0 {
				return nil, ErrBadRequest
			}
			p.TokenIds = lists[0]
		default:
			return nil, ErrBadRequest
		}
		return p, nil
	}
	p.OpenaiBody = body
	return p, nil
}

// FuzzPromptOf: the picker's reading of a body (its fast scanner, then
// encoding/json) means what encoding/json alone reads, and refuses what it
// refuses, with ErrBadRequest.
func FuzzPromptOf(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":[1,2,3]}`,
		` { "model" : "m" , "prompt" : [ 1 , 2 ] , "stream" : true } `,
		`{"model":"m","prompt":[[1,2],[3]]}`,
		`{"model":"m","prompt":"text"}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","prompt":[]}`,
		`{"model":"m","prompt":[1,-2]}`,
		`{"model":"m","prompt":[4294967296]}`,
		`{"model":"m","prompt":[1e3]}`,
		`{"model":"m","prompt":[01]}`,
		`{"model":"a","MODEL":"b","prompt":[1]}`,
		`{"model":"m\u0041","prompt":[1]}`,
		`{"model":"m","prompt":[1],"x":{"y":["]}"]}}`,
		`{"model":"m","prompt":[1],}`,
		`{"model":"m","prompt":[1]`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`[1,2]`, `null`, ``,
	} {
		f.Add("/v1/completions", []byte(s))
		f.Add("/v1/chat/completions", []byte(s))
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		got, err := promptOf(path, body)
		want, werr := referencePrompt(path, body)
		if (err != nil) != (werr != nil) {
			t.Fatalf("promptOf(%q, %q) err %v, encoding/json's %v", path, body, err, werr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not ErrBadRequest", err)
			}
			return
		}
		if got.GetModel() != want.GetModel() || !slices.Equal(got.GetTokenIds(), want.GetTokenIds()) ||
			string(got.GetOpenaiBody()) != string(want.GetOpenaiBody()) {
			t.Fatalf("promptOf(%q, %q) = %v, encoding/json reads %v", path, body, got, want)
		}
	})
}
