package textgen

import (
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/bench/trace"
)

// Form is how a prompt is sent to the router and the engines.
type Form string

// Prompt forms: Prompt.text, or Prompt.openai_body holding a /v1/completions or a
// /v1/chat/completions body (one user message).
const (
	FormText        Form = "text"
	FormCompletions Form = "completions"
	FormChat        Form = "chat"
)

// ParseForm reads a form name.
func ParseForm(s string) (Form, error) {
	switch f := Form(s); f {
	case FormText, FormCompletions, FormChat:
		return f, nil
	}
	return "", fmt.Errorf("prompt form %q: want text, completions or chat", s)
}

// Body reports whether prompts of form f are OpenAI bodies.
func (f Form) Body() bool { return f == FormCompletions || f == FormChat }

type completionBody struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatBody struct {
	Model     string    `json:"model"`
	Messages  []message `json:"messages"`
	MaxTokens int       `json:"max_tokens"`
}

// Prompt is r's prompt in form f for model: its text, or the OpenAI body carrying it.
func (l *Lexicon) Prompt(f Form, model string, r trace.Request) []byte {
	text := string(l.AppendText(nil, r))
	var v any
	switch f {
	case FormCompletions:
		v = completionBody{Model: model, Prompt: text, MaxTokens: r.OutputLength}
	case FormChat:
		v = chatBody{Model: model, Messages: []message{{Role: "user", Content: text}}, MaxTokens: r.OutputLength}
	default:
		return []byte(text)
	}
	b, err := json.Marshal(v)
	if err != nil { // strings and ints only: cannot fail
		panic(err)
	}
	return b
}
