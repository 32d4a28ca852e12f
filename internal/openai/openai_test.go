package openai

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseRefusals(t *testing.T) {
	lim := Limits{MaxBodyBytes: 4096, MaxDepth: 8, MaxMessages: 3}
	for _, c := range []struct {
		body, field string
	}{
		{`[]`, "body"},
		{`{"model": 1, "prompt": "x"}`, "model"},
		{`{"prompt": "x"}`, "model"},
		{`{"model": "m"}`, "prompt"},
		{`{"model": "m", "prompt": "x", "messages": []}`, "messages"},
		{`{"model": "m", "prompt": ["a", "b"]}`, "prompt"},
		{`{"model": "m", "prompt": []}`, "prompt"},
		{`{"model": "m", "prompt": [1, -2]}`, "prompt[1]"},
		{`{"model": "m", "prompt": [1.5]}`, "prompt[0]"},
		{`{"model": "m", "prompt": {"a": 1}}`, "prompt"},
		{`{"model": "m", "messages": []}`, "messages"},
		{`{"model": "m", "messages": "hi"}`, "messages"},
		{`{"model": "m", "messages": [{"role":"user","content":"a"},{"role":"user","content":"a"},{"role":"user","content":"a"},{"role":"user","content":"a"}]}`, "messages"},
		{`{"model": "m", "messages": [{"content": "x"}]}`, "messages[0].role"},
		{`{"model": "m", "messages": [{"role": "user", "content": 3}]}`, "messages[0].content"},
		{`{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}`, "messages[0].content[0]"},
		{`{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{nope"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {}}`, "tools"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"}`, "add_generation_prompt"},
		{`{"model": "m", "prompt": "x", "add_special_tokens": 1}`, "add_special_tokens"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []}`, "chat_template_kwargs"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "chat_template": "{{x}}"}`, "chat_template"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "continue_final_message": true}`, "continue_final_message"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "continue_final_message": true, "add_generation_prompt": true}`, "continue_final_message"},
		{`{"model": "m", "prompt": "x", "cache_salt": 5}`, "cache_salt"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x"}], "documents": [{"text": "d"}]}`, "documents"},
		{`{"model": "m", "prompt": "x", "pad": [[[[[[[[[1]]]]]]]]]}`, "body"},
		{`{"model": "m", "prompt": "` + strings.Repeat("x", 5000) + `"}`, "body"},
	} {
		_, err := Parse([]byte(c.body), lim)
		var fe *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%.80s: err = %v, want a refusal of field %q", c.body, err, c.field)
		}
	}
}

func TestParse(t *testing.T) {
	lim := DefaultLimits()
	r, err := Parse([]byte(`{"model": "m", "prompt": "hi", "add_special_tokens": false, "cache_salt": "s", "max_tokens": 5}`), lim)
	if err != nil || r.Kind != Completion || r.Prompt != "hi" || *r.AddSpecialTokens || r.CacheSalt != "s" {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = Parse([]byte(`{"model": "m", "prompt": [[1, 2, 3]]}`), lim)
	if err != nil || !slices.Equal(r.PromptTokens, []uint32{1, 2, 3}) {
		t.Fatalf("%+v %v", r, err)
	}
	body := `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
		{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"}}]}],
		"tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}],
		"chat_template_kwargs": {"enable_thinking": false}}`
	r, err = Parse([]byte(body), lim)
	if err != nil || r.Kind != Chat || r.AddGenerationPrompt != nil || len(r.Tools) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	if c, _ := r.Messages[0].(*Object).Get("content"); c != "a\nb" {
		t.Fatalf("text parts joined: %q", c)
	}
	tc, _ := r.Messages[1].(*Object).Get("tool_calls")
	fn, _ := tc.([]any)[0].(*Object).Get("function")
	args, _ := fn.(*Object).Get("arguments")
	if o, ok := args.(*Object); !ok || !slices.Equal(o.Keys, []string{"z", "a"}) {
		t.Fatalf("arguments decoded in order: %#v", args)
	}
	if v, _ := r.ChatTemplateKwargs.Get("enable_thinking"); v != false {
		t.Fatalf("kwargs: %#v", r.ChatTemplateKwargs)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model": "m", "prompt": "hi"}`))
	f.Add([]byte(`{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "tools": [{}]}`))
	f.Add([]byte(`{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{\"a\":[1]}"}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b, Limits{MaxBodyBytes: 1 << 16, MaxDepth: 16, MaxMessages: 64})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		if r.Model == "" || (r.Kind != Completion && r.Kind != Chat) {
			t.Fatalf("accepted without model or kind: %+v", r)
		}
	})
}
