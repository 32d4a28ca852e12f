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
	if model, prompt, ok := scanRequest(body); ok && isCompletions(path) {
		if ids, ok := plainIDs(prompt); ok && model != "" {
			return &kvrouterv1.Prompt{Model: model, TokenIds: ids}, nil
		}
	}
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
	if ids, ok = parseIDs(raw); !ok {
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, false, fmt.Errorf("%w: prompt is not a list of token ids: %v", ErrBadRequest, err)
		}
	}
	if len(ids) == 0 {
		return nil, false, fmt.Errorf("%w: prompt is an empty list", ErrBadRequest)
	}
	return ids, true, nil
}

// plainIDs is parseIDs of a prompt that is an array.
func plainIDs(raw []byte) ([]uint32, bool) {
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false
	}
	ids, ok := parseIDs(raw)
	return ids, ok && len(ids) > 0
}

// parseIDs reads a JSON array of token ids in its plain form (decimal
// integers under 2^32, commas, whitespace) without reflection; the token ids
// of an 8k-token prompt otherwise cost more than routing it. ok is false for
// anything else (exponents, fractions, signs, overflow), which encoding/json
// then reads, and refuses with its own message. raw is a valid JSON value.
func parseIDs(raw []byte) (ids []uint32, ok bool) {
	ids = make([]uint32, 0, len(raw)/4)
	i := 1 // past '['
	for {
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if i < len(raw) && raw[i] == ']' && len(ids) == 0 {
			return ids, true
		}
		start := i
		var v uint64
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			v = v*10 + uint64(raw[i]-'0')
			if v > 1<<32-1 {
				return nil, false
			}
			i++
		}
		if i == start || (raw[start] == '0' && i-start > 1) {
			return nil, false
		}
		ids = append(ids, uint32(v))
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i++
		case ']':
			return ids, i == len(raw)-1
		default:
			return nil, false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
