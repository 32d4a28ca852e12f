package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/textgen"
	"github.com/kvrouter/kvrouter/bench/trace"
	"github.com/kvrouter/kvrouter/bench/tracegen"
	"github.com/kvrouter/kvrouter/internal/chattemplate"
)

const textTokenizerUsage = "send prompts as text made for this tokenizer: qwen3 or llama3 (the repository's committed files) or a directory with tokenizer.json (or .gz); empty: token ids"

// loadLexicon resolves a --text-tokenizer argument; cleanup removes an ungzipped copy.
func loadLexicon(arg string) (lex *textgen.Lexicon, dir string, cleanup func(), err error) {
	dir, cleanup, err = textgen.Dir(arg)
	if err != nil {
		return nil, "", nil, err
	}
	if lex, err = textgen.Load(dir); err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("text tokenizer %s: %w", arg, err)
	}
	return lex, dir, cleanup, nil
}

// applyText makes a comparison send its requests as text in form: Route gets Prompt.text or
// Prompt.openai_body, the router loads the tokenizer for the model (--model), and the engines
// tokenize the text (render the chat) themselves.
func applyText(cfg *replay.CompareConfig, arg, form string) (cleanup func(), err error) {
	f, err := textgen.ParseForm(form)
	if err != nil {
		return nil, err
	}
	lex, dir, cleanup, err := loadLexicon(arg)
	if err != nil {
		return nil, err
	}
	if f == textgen.FormChat {
		if cfg.ChatTemplate, err = chattemplate.Load(dir); err != nil {
			cleanup()
			return nil, fmt.Errorf("text tokenizer %s: %w", arg, err)
		}
	}
	if cfg.Model == "" {
		cfg.Model = "bench-model"
	}
	reqs, model := cfg.Requests, cfg.Model
	cfg.Text = func(seq int) string { return string(lex.Prompt(f, model, reqs[seq])) }
	cfg.TextBody = f.Body()
	cfg.Tokenizer = lex.Tokenizer()
	cfg.Router.Args = append(cfg.Router.Args, "--model", cfg.Model+"="+dir)
	return cleanup, nil
}

// writeTextTrace writes reqs as Mooncake JSONL with each request's prompt text added as "text",
// and for a body form the OpenAI body for model as "openai_body" (a JSON object).
func writeTextTrace(path string, reqs []tracegen.Request, blockTokens int, lex *textgen.Lexicon, form textgen.Form, model string) error {
	if path == "-" || path == "" {
		return writeText(os.Stdout, reqs, blockTokens, lex, form, model)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeText(f, reqs, blockTokens, lex, form, model); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeText(w io.Writer, reqs []tracegen.Request, blockTokens int, lex *textgen.Lexicon, form textgen.Form, model string) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var line bytes.Buffer
	for i := range reqs {
		line.Reset()
		if err := tracegen.Write(&line, reqs[i:i+1]); err != nil {
			return err
		}
		b := bytes.TrimSuffix(line.Bytes(), []byte("}\n"))
		r := trace.Request{InputLength: reqs[i].InputLength, OutputLength: reqs[i].OutputLength,
			HashIDs: reqs[i].HashIDs, BlockTokens: blockTokens}
		text, err := json.Marshal(lex.Text(r))
		if err != nil {
			return err
		}
		bw.Write(b)
		bw.WriteString(`, "text": `)
		bw.Write(text)
		if form.Body() {
			bw.WriteString(`, "openai_body": `)
			bw.Write(lex.Prompt(form, model, r))
		}
		bw.WriteString("}\n")
	}
	return bw.Flush()
}
