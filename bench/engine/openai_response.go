package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// responder writes one request's response as the backend's timing allows:
// a streaming response's headers at once, its first token at the end of
// prefill, the rest (one event, as vLLM batches deltas with
// stream_interval) and [DONE] at the finish; a plain response at the finish.
type responder struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	j       *Job
	stream  bool
	usage   bool
	created int64
	firsted bool
	started bool
}

// simToken is the text of one simulated output token.
const simToken = " tok"

func (o *responder) start() {
	o.rc = http.NewResponseController(o.w)
	if !o.stream {
		return
	}
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	o.w.WriteHeader(http.StatusOK)
	o.rc.Flush()
	o.started = true
}

func (o *responder) first() {
	if o.firsted {
		return
	}
	o.firsted = true
	if o.stream {
		o.event(o.chunk(simToken, true, nil))
	}
}

func (o *responder) finish(err error) {
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return // the client left
		}
		status := http.StatusInternalServerError
		if errors.Is(err, ErrTooLong) {
			status = http.StatusBadRequest
		}
		if !o.started {
			openAIError(o.w, status, err.Error())
			return
		}
		o.event(map[string]any{"error": map[string]any{"message": err.Error(), "code": status}})
		o.done()
		return
	}
	o.first()
	rest := strings.Repeat(simToken, o.j.MaxTokens-1)
	if !o.stream {
		o.w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(o.w).Encode(o.whole(simToken + rest))
		return
	}
	if rest != "" {
		o.event(o.chunk(rest, false, nil))
	}
	fin := "length"
	o.event(o.chunk("", false, &fin))
	if o.usage {
		u := o.chunk("", false, nil)
		u["choices"] = []any{}
		u["usage"] = o.usageOf()
		o.event(u)
	}
	o.done()
}

func (o *responder) event(v any) {
	b, _ := json.Marshal(v)
	o.w.Write([]byte("data: "))
	o.w.Write(b)
	o.w.Write([]byte("\n\n"))
	o.rc.Flush()
}

func (o *responder) done() {
	o.w.Write([]byte("data: [DONE]\n\n"))
	o.rc.Flush()
}

func (o *responder) head(object string) map[string]any {
	prefix := "cmpl-"
	if o.j.Chat {
		prefix = "chatcmpl-"
	}
	return map[string]any{"id": prefix + o.j.ID, "object": object, "created": o.created, "model": o.j.Model}
}

func (o *responder) chunk(text string, firstChunk bool, finish *string) map[string]any {
	var c map[string]any
	if o.j.Chat {
		c = o.head("chat.completion.chunk")
		delta := map[string]any{}
		if firstChunk {
			delta["role"] = "assistant"
		}
		if text != "" || firstChunk {
			delta["content"] = text
		}
		c["choices"] = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	} else {
		c = o.head("text_completion")
		c["choices"] = []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}}
	}
	return c
}

func (o *responder) whole(text string) map[string]any {
	var c map[string]any
	if o.j.Chat {
		c = o.head("chat.completion")
		c["choices"] = []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
			"logprobs": nil, "finish_reason": "length"}}
	} else {
		c = o.head("text_completion")
		c["choices"] = []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": "length"}}
	}
	c["usage"] = o.usageOf()
	return c
}

func (o *responder) usageOf() map[string]int {
	p, k := len(o.j.Tokens), o.j.MaxTokens
	return map[string]int{"prompt_tokens": p, "completion_tokens": k, "total_tokens": p + k}
}

// openAIError writes an OpenAI-shaped error.
func openAIError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": http.StatusText(status), "code": status}})
}
