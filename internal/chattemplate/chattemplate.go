// Package chattemplate renders a model's chat template (Jinja, from tokenizer_config.json or a
// chat_template.jinja beside it) as transformers' apply_chat_template does, with
// github.com/ardanlabs/jinja: a pure-Go engine built for chat templates, with Hugging Face's
// trim_blocks / lstrip_blocks defaults and the raise_exception and strftime_now globals.
package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"

	"github.com/kvrouter/kvrouter/internal/openai"
)

// ErrNoTemplate is returned by Load when the directory holds no chat template (gpt-oss renders
// chat with its own harmony format, for example): such a model refuses chat bodies.
var ErrNoTemplate = errors.New("no chat template")

// Template is a compiled chat template; safe for concurrent use.
type Template struct {
	name    string
	tmpl    *jinja.Template
	special map[string]any // bos_token, eos_token, ... as the template sees them
}

// Input is one rendering's data. Values are decoded JSON as openai.DecodeOrdered returns it
// (objects as *openai.Object, keeping their key order).
type Input struct {
	Messages            []any
	Tools               []any
	AddGenerationPrompt bool
	// Kwargs are chat_template_kwargs (for example Qwen3's enable_thinking); they override
	// the other variables, as in transformers.
	Kwargs *openai.Object
	// ContinueFinalMessage ends the text at the last message's content, leaving it open for
	// the model to continue (a prefill); it excludes AddGenerationPrompt.
	ContinueFinalMessage bool
}

type configJSON struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	UNK          json.RawMessage `json:"unk_token"`
	PAD          json.RawMessage `json:"pad_token"`
}

// Load reads dir's chat_template.jinja, or else tokenizer_config.json's chat_template.
func Load(dir string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	src, err := os.ReadFile(jinjaPath)
	switch {
	case err == nil:
		return Parse(jinjaPath, string(src), cfg)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	return FromConfig(cfgPath, cfg)
}

// FromConfig builds the template in a tokenizer_config.json's bytes.
func FromConfig(name string, cfg []byte) (*Template, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%s: %w", name, ErrNoTemplate)
	}
	var c configJSON
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	src, err := templateSource(c.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("%s: chat_template: %w", name, err)
	}
	return Parse(name, src, cfg)
}

// templateSource reads chat_template as a string or as a list of {name, template}, taking the
// one named "default" as transformers does.
func templateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ErrNoTemplate
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", err
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("%d named templates, none named default: %w", len(named), ErrNoTemplate)
}

// Parse compiles src (named name in errors) with the special tokens of the tokenizer_config.json
// bytes cfg (nil: none), and renders a probe conversation so that a template this engine cannot
// render is refused at start, not at the first request.
func Parse(name, src string, cfg []byte) (*Template, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%s: chat template does not compile: %w", name, err)
	}
	t := &Template{name: name, tmpl: tmpl, special: map[string]any{}}
	if cfg != nil {
		var c configJSON
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for k, raw := range map[string]json.RawMessage{"bos_token": c.BOS, "eos_token": c.EOS, "unk_token": c.UNK, "pad_token": c.PAD} {
			if s, ok := tokenContent(raw); ok {
				t.special[k] = s
			}
		}
	}
	for _, probe := range probes {
		if _, err := t.Render(probe); err != nil {
			return nil, fmt.Errorf("%s: chat template cannot render a plain conversation: %w", name, err)
		}
	}
	return t, nil
}

// probes are conversations every chat template renders.
var probes = []Input{
	{Messages: []any{msg("user", "Hello")}, AddGenerationPrompt: true},
	{Messages: []any{msg("system", "Be brief."), msg("user", "Hello"), msg("assistant", "Hi."), msg("user", "Bye")},
		AddGenerationPrompt: true},
}

func msg(role, content string) *openai.Object {
	return &openai.Object{Keys: []string{"role", "content"}, Vals: []any{role, content}}
}

func tokenContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != "" {
		return o.Content, true
	}
	return "", false
}

// Render renders in.
func (t *Template) Render(in Input) (string, error) {
	data := make(map[string]jinja.Value, len(t.special)+4)
	for k, v := range t.special {
		data[k] = jinja.FromGoValue(v)
	}
	data["messages"] = value(in.Messages)
	if in.Tools != nil {
		data["tools"] = value(in.Tools)
	}
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	if in.Kwargs != nil {
		for i, k := range in.Kwargs.Keys {
			data[k] = value(in.Kwargs.Vals[i])
		}
	}
	out, err := t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.name, err)
	}
	if in.ContinueFinalMessage {
		return continueFinal(out, in)
	}
	return out, nil
}

// continueFinal cuts the rendered text after the last occurrence of the final message's content,
// as transformers does (retrying with the content stripped, for templates that trim messages).
func continueFinal(out string, in Input) (string, error) {
	if in.AddGenerationPrompt {
		return "", errors.New("continue_final_message and add_generation_prompt exclude each other")
	}
	if len(in.Messages) == 0 {
		return "", errors.New("continue_final_message without messages")
	}
	final := ""
	if m, ok := in.Messages[len(in.Messages)-1].(*openai.Object); ok {
		c, _ := m.Get("content")
		final, _ = c.(string)
	}
	if i := strings.LastIndex(out, final); i >= 0 {
		return out[:i+len(final)], nil
	}
	final = strings.TrimFunc(final, pyIsSpace)
	if i := strings.LastIndex(out, final); i >= 0 {
		return out[:i+len(final)], nil
	}
	return "", errors.New("continue_final_message: the final message's content is not in the rendered text")
}

// pyIsSpace is Python's str.isspace, which str.strip uses: Go's unicode.IsSpace and the
// separators U+001C to U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// Name is the file the template came from.
func (t *Template) Name() string { return t.name }

// value converts decoded JSON to a template value, keeping objects' key order.
func value(v any) jinja.Value {
	switch x := v.(type) {
	case nil:
		return jinja.None()
	case bool:
		return jinja.NewBool(x)
	case string:
		return jinja.NewString(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return jinja.NewInt(i)
		}
		f, _ := x.Float64()
		return jinja.NewFloat(f)
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			items[i] = value(e)
		}
		return jinja.NewList(items)
	case *openai.Object:
		d := jinja.NewDict()
		for i, k := range x.Keys {
			d.AsDict().Set(k, value(x.Vals[i]))
		}
		return d
	}
	return jinja.FromGoValue(v)
}
