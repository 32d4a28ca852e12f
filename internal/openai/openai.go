package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrInvalid matches every error Parse returns.
var ErrInvalid = errors.New("invalid OpenAI request body")

// Error is a refusal naming the body's field.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string { return fmt.Sprintf("openai_body.%s: %s", e.Field, e.Msg) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Limits bound what Parse accepts.
type Limits struct {
	// MaxBodyBytes bounds the body.
	MaxBodyBytes int
	// MaxDepth bounds the nesting of JSON arrays and objects.
	MaxDepth int
	// MaxMessages bounds a chat body's messages.
	MaxMessages int
}

// DefaultLimits are generous for real requests and bound a hostile one.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 8 << 20, MaxDepth: 64, MaxMessages: 4096}
}

// Validate fills zero fields with defaults and checks the rest.
func (l *Limits) Validate() error {
	d := DefaultLimits()
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxMessages == 0 {
		l.MaxMessages = d.MaxMessages
	}
	if l.MaxBodyBytes < 0 || l.MaxDepth < 0 || l.MaxMessages < 0 {
		return errors.New("openai: limits must not be negative")
	}
	return nil
}

// Kind is the endpoint a body is for.
type Kind uint8

// Body kinds: a body with "prompt" is a completion, one with "messages" a chat.
const (
	Completion Kind = iota + 1
	Chat
)

// Request is what decides a body's prompt tokens.
type Request struct {
	Kind  Kind
	Model string
	// Prompt is a completion's text; PromptTokens its token ids when given as ids (used as
	// given, as the engine does).
	Prompt       string
	PromptTokens []uint32
	// Messages, Tools and ChatTemplateKwargs are the chat body's, decoded with their keys in
	// order (see Object) for the template.
	Messages []any
	Tools    []any
	// AddGenerationPrompt, AddSpecialTokens: nil when the body does not set them.
	AddGenerationPrompt  *bool
	ContinueFinalMessage bool
	AddSpecialTokens     *bool
	ChatTemplateKwargs   *Object
	CacheSalt            string
}

// body is the subset of the JSON decoded; the rest is ignored.
type body struct {
	Model                json.RawMessage `json:"model"`
	Prompt               json.RawMessage `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	AddGenerationPrompt  json.RawMessage `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	AddSpecialTokens     json.RawMessage `json:"add_special_tokens"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	CacheSalt            json.RawMessage `json:"cache_salt"`
	ChatTemplate         json.RawMessage `json:"chat_template"`
	Documents            json.RawMessage `json:"documents"`
}

// Parse reads b within lim (which Validate has checked).
func Parse(b []byte, lim Limits) (*Request, error) {
	if len(b) > lim.MaxBodyBytes {
		return nil, fieldErr("body", "%d bytes, over the limit of %d", len(b), lim.MaxBodyBytes)
	}
	if err := checkDepth(b, lim.MaxDepth); err != nil {
		return nil, err
	}
	var raw body
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fieldErr("body", "not a JSON object: %v", err)
	}
	r := &Request{}
	if err := str(raw.Model, "model", &r.Model); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, fieldErr("model", "missing")
	}
	if !isNull(raw.ChatTemplate) {
		return nil, fieldErr("chat_template", "a request's own template is not supported; the model's is used")
	}
	if !isNull(raw.Documents) {
		return nil, fieldErr("documents", "not supported: the template would render them")
	}
	hasPrompt, hasMessages := !isNull(raw.Prompt), !isNull(raw.Messages)
	switch {
	case hasPrompt && hasMessages:
		return nil, fieldErr("messages", "set with prompt; a body is a completion (prompt) or a chat (messages)")
	case hasPrompt:
		r.Kind = Completion
		if err := parsePrompt(raw.Prompt, r); err != nil {
			return nil, err
		}
	case hasMessages:
		r.Kind = Chat
		if err := parseMessages(raw.Messages, lim, r); err != nil {
			return nil, err
		}
	default:
		return nil, fieldErr("prompt", "missing (and no messages)")
	}
	return r, parseFlags(&raw, r)
}

func parseFlags(raw *body, r *Request) error {
	if !isNull(raw.Tools) {
		v, err := DecodeOrdered(raw.Tools)
		tools, ok := v.([]any)
		if err != nil || !ok {
			return fieldErr("tools", "not an array")
		}
		r.Tools = tools
	}
	for _, f := range []struct {
		raw  json.RawMessage
		name string
		dst  **bool
	}{{raw.AddGenerationPrompt, "add_generation_prompt", &r.AddGenerationPrompt}, {raw.AddSpecialTokens, "add_special_tokens", &r.AddSpecialTokens}} {
		if isNull(f.raw) {
			continue
		}
		var v bool
		if err := json.Unmarshal(f.raw, &v); err != nil {
			return fieldErr(f.name, "not a boolean")
		}
		*f.dst = &v
	}
	if !isNull(raw.ContinueFinalMessage) {
		if err := json.Unmarshal(raw.ContinueFinalMessage, &r.ContinueFinalMessage); err != nil {
			return fieldErr("continue_final_message", "not a boolean")
		}
		if r.ContinueFinalMessage && (r.AddGenerationPrompt == nil || *r.AddGenerationPrompt) {
			// As the engine: the generation prompt defaults to true, and both cannot be.
			return fieldErr("continue_final_message", "true needs add_generation_prompt false")
		}
	}
	if !isNull(raw.ChatTemplateKwargs) {
		v, err := DecodeOrdered(raw.ChatTemplateKwargs)
		kw, ok := v.(*Object)
		if err != nil || !ok {
			return fieldErr("chat_template_kwargs", "not an object")
		}
		r.ChatTemplateKwargs = kw
	}
	return str(raw.CacheSalt, "cache_salt", &r.CacheSalt)
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func str(raw json.RawMessage, field string, dst *string) error {
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fieldErr(field, "not a string")
	}
	return nil
}

// parsePrompt takes a string, a one-string array, or an array of token ids.
func parsePrompt(raw json.RawMessage, r *Request) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.Prompt = s
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fieldErr("prompt", "neither a string nor an array")
	}
	if len(items) == 0 {
		return fieldErr("prompt", "an empty array")
	}
	if json.Unmarshal(items[0], &s) == nil || bytes.HasPrefix(bytes.TrimSpace(items[0]), []byte("[")) {
		if len(items) > 1 {
			return fieldErr("prompt", "a batch of %d prompts; route each on its own", len(items))
		}
		if json.Unmarshal(items[0], &s) == nil {
			r.Prompt = s
			return nil
		}
		return parseIDs(items[0], "prompt[0]", r)
	}
	return parseIDs(raw, "prompt", r)
}

func parseIDs(raw json.RawMessage, field string, r *Request) error {
	var nums []float64
	if err := json.Unmarshal(raw, &nums); err != nil {
		return fieldErr(field, "neither a string nor token ids")
	}
	r.PromptTokens = make([]uint32, len(nums))
	for i, n := range nums {
		if n < 0 || n > math.MaxUint32 || n != math.Trunc(n) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v is not a token id", n)
		}
		r.PromptTokens[i] = uint32(n)
	}
	return nil
}

// parseMessages checks each message's role and content; a content given as parts must be text
// parts, joined with newlines as the engine does for templates that take a string.
func parseMessages(raw json.RawMessage, lim Limits, r *Request) error {
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return fieldErr("messages", "not an array")
	}
	if len(msgs) == 0 {
		return fieldErr("messages", "empty")
	}
	if len(msgs) > lim.MaxMessages {
		return fieldErr("messages", "%d messages, over the limit of %d", len(msgs), lim.MaxMessages)
	}
	r.Messages = make([]any, len(msgs))
	for i, m := range msgs {
		msg, err := parseMessage(m, fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return err
		}
		r.Messages[i] = msg
	}
	return nil
}

func parseMessage(raw json.RawMessage, field string) (*Object, error) {
	v, err := DecodeOrdered(raw)
	msg, ok := v.(*Object)
	if err != nil || !ok {
		return nil, fieldErr(field, "not an object")
	}
	rv, _ := msg.Get("role")
	role, ok := rv.(string)
	if !ok || role == "" {
		return nil, fieldErr(field+".role", "missing or not a string")
	}
	cv, _ := msg.Get("content")
	switch c := cv.(type) {
	case nil, string:
	case []any:
		texts := make([]string, 0, len(c))
		for j, p := range c {
			part, _ := p.(*Object)
			if part == nil {
				return nil, fieldErr(fmt.Sprintf("%s.content[%d]", field, j), "not an object")
			}
			tv, _ := part.Get("type")
			typ, _ := tv.(string)
			xv, _ := part.Get("text")
			text, isText := xv.(string)
			if typ != "text" || !isText {
				return nil, fieldErr(fmt.Sprintf("%s.content[%d]", field, j), "type %q; only text parts are supported", typ)
			}
			texts = append(texts, text)
		}
		msg.Set("content", strings.Join(texts, "\n"))
	default:
		return nil, fieldErr(field+".content", "neither a string nor an array of parts")
	}
	return msg, parseToolCalls(msg, field)
}

// parseToolCalls decodes tool call arguments given as a JSON string into the object they hold,
// as the engine does before rendering (templates print them with tojson).
func parseToolCalls(msg *Object, field string) error {
	tv, _ := msg.Get("tool_calls")
	calls, _ := tv.([]any)
	for i, c := range calls {
		call, _ := c.(*Object)
		if call == nil {
			return fieldErr(fmt.Sprintf("%s.tool_calls[%d]", field, i), "not an object")
		}
		fv, _ := call.Get("function")
		fn, _ := fv.(*Object)
		if fn == nil {
			continue
		}
		av, _ := fn.Get("arguments")
		s, ok := av.(string)
		if !ok || s == "" {
			continue
		}
		if err := checkDepth([]byte(s), DefaultLimits().MaxDepth); err != nil {
			return fieldErr(fmt.Sprintf("%s.tool_calls[%d].function.arguments", field, i), "nested too deep")
		}
		args, err := DecodeOrdered([]byte(s))
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.tool_calls[%d].function.arguments", field, i), "not JSON: %v", err)
		}
		fn.Set("arguments", args)
	}
	return nil
}

// checkDepth refuses JSON nested deeper than max before anything decodes it.
func checkDepth(b []byte, max int) error {
	depth, inStr, esc := 0, false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			depth++
			if depth > max {
				return fieldErr("body", "JSON nested deeper than %d", max)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}
