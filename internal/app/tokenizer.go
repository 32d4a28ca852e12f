package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/enginetok"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// ModelConfig names a model's tokenizer files: a directory with its tokenizer.json and, for
// chat bodies, tokenizer_config.json (chat_template) or chat_template.jinja. Or, instead,
// TokenizerEndpoint: an engine's base URL whose POST /tokenize (vLLM's) tokenizes.
type ModelConfig struct {
	Name              string `yaml:"name"`
	Tokenizer         string `yaml:"tokenizer"`
	TokenizerEndpoint string `yaml:"tokenizer_endpoint"`
}

// ModelConfigs are the models whose prompts may come as text or OpenAI bodies.
type ModelConfigs []ModelConfig

// RegisterFlags adds --model NAME=DIR, repeatable, after the file's models.
func (m *ModelConfigs) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("model", "NAME=DIR: tokenize text and OpenAI-body prompts of model NAME with the tokenizer files in DIR (repeatable)", func(s string) error {
		name, dir, ok := strings.Cut(s, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("%q: want NAME=DIR", s)
		}
		*m = append(*m, ModelConfig{Name: name, Tokenizer: dir})
		return nil
	})
}

// Validate refuses a model without a name or directory, or named twice.
func (m ModelConfigs) Validate() error {
	seen := make(map[string]bool, len(m))
	for i, c := range m {
		switch {
		case c.Name == "":
			return fmt.Errorf("config: models[%d].name is empty", i)
		case (c.Tokenizer == "") == (c.TokenizerEndpoint == ""):
			return fmt.Errorf("config: models[%d] (%s): set one of tokenizer (the directory of its tokenizer.json) and tokenizer_endpoint (an engine's URL)", i, c.Name)
		case seen[c.Name]:
			return fmt.Errorf("config: models[%d]: model %q is listed twice", i, c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// tokenizerModule loads every configured model's tokenizer and chat template at start (a file
// it cannot load exactly stops the start-up) and gives them to the server.
func tokenizerModule(a *App) error {
	cfg := a.Config()
	models := make([]server.TextModel, 0, len(cfg.Models))
	for _, mc := range cfg.Models {
		if mc.TokenizerEndpoint != "" {
			m, err := engineModel(mc)
			if err != nil {
				return err
			}
			a.Logger().Info("tokenizer checked", "model", mc.Name, "engine", m.Engine.Name())
			models = append(models, m)
			continue
		}
		m, err := loadModel(mc)
		if err != nil {
			return err
		}
		chat := "chat bodies refused: no chat template"
		if m.Template != nil {
			chat = "chat template " + m.Template.Name()
		}
		a.Logger().Info("tokenizer loaded", "model", mc.Name, "tokenizer", m.Tokenizer.Name(), "chat", chat)
		models = append(models, m)
	}
	return a.Server().SetText(server.TextConfig{Models: models, BlockSize: cfg.Scoring.BlockSize})
}

func loadModel(mc ModelConfig) (server.TextModel, error) {
	tk, err := tokenizer.Load(mc.Tokenizer)
	if err != nil {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	tm, err := chattemplate.Load(mc.Tokenizer)
	if err != nil && !errors.Is(err, chattemplate.ErrNoTemplate) {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	return server.TextModel{Name: mc.Name, Tokenizer: tk, Template: tm}, nil
}

// engineModel checks that the engine's /tokenize answers (a 404 stops the start).
func engineModel(mc ModelConfig) (server.TextModel, error) {
	cl, err := enginetok.New(enginetok.Config{Endpoint: mc.TokenizerEndpoint, Model: mc.Name})
	if err != nil {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	if err := cl.Check(context.Background()); err != nil {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	return server.TextModel{Name: mc.Name, Engine: cl}, nil
}
