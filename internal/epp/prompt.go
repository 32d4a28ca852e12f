package epp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// openAIRequest is what the picker reads of an OpenAI request body.
type openAIRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
}

// promptOf is the router prompt of an OpenAI request body sent to path.
// A /v1/completions prompt of token ids (or a list of them: the first is
// routed) is routed from those ids with no tokenizer; every other body goes
// to the router whole, as openai_body, for its tokenizers. The model names
// the pool. body is kept by the prompt (not copied).
func promptOf(path string, body []byte) (*kvrouterv1.Prompt, error) {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("%w: body is not JSON: %v", ErrBadRequest, err)
	}
	if req.Model == "" {
		return nil, fmt.Errorf("%w: body has no \"model\"", ErrBadRequest)
	}
	p := &kvrouterv1.Prompt{Model: req.Model}
	if isCompletions(path) {
		ids, ok, err := tokenIDs(req.Prompt)
		if err != nil {
			return nil, err
		}
		if ok {
			p.TokenIds = ids
			return p, nil
		}
	}
	p.OpenaiBody = body
	return p, nil
}

// isCompletions reports whether path (query string and all) is the
// completions endpoint.
func isCompletions(path string) bool {
	path, _, _ = strings.Cut(path, "?")
	return strings.HasSuffix(strings.TrimRight(path, "/"), "/completions") && !strings.HasSuffix(path, "/chat/completions")
}

// tokenIDs reads a completions prompt given as token ids ([1,2,3]) or a
// list of them ([[1,2],[3]]: the first). ok is false for a text prompt.
func tokenIDs(raw json.RawMessage) (ids []uint32, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false, nil
	}
	inner := bytes.TrimSpace(raw[1:])
	switch {
	case len(inner) > 0 && inner[0] == '"':
		return nil, false, nil // a list of texts
	case len(inner) > 0 && inner[0] == '[':
		var lists [][]uint32
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, false, fmt.Errorf("%w: prompt is not a list of token id lists: %v", ErrBadRequest, err)
		}
		if len(lists) == 0 || len(lists[0]) == 0 {
			return nil, false, fmt.Errorf("%w: prompt's first token id list is empty", ErrBadRequest)
		}
		return lists[0], true, nil
	}
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, false, fmt.Errorf("%w: prompt is not a list of token ids: %v", ErrBadRequest, err)
	}
	if len(ids) == 0 {
		return nil, false, fmt.Errorf("%w: prompt is an empty list", ErrBadRequest)
	}
	return ids, true, nil
}
