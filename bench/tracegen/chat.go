package tracegen

import "math/rand/v2"

// Chat is multi-turn chat: conversations that share a few system prompts
// (Zipf popularity). Turn 1's prompt is system prompt + user message; turn
// n's is turn n-1's prompt + its answer + a new user message, so it starts
// with every full block of turn n-1. Between turns the user reads the answer
// and thinks (Think, seconds, after the answer is generated).
type ChatConfig struct {
	// SystemPrompts is how many distinct system prompts there are; rank 0
	// is the most popular (Config.Zipf).
	SystemPrompts int
	SystemLen     Dist // tokens of each system prompt (drawn once per prompt)
	UserLen       Dist // tokens of each user message
	OutputLen     Dist // tokens of each answer
	Turns         Dist // turns per conversation
	Think         Dist // seconds between an answer and the next turn
}

// DefaultChat is a chat assistant: 8 system prompts of about 1,500 tokens,
// user messages of 300 tokens on average with a long tail (pasted text),
// answers of 350, 6 turns on average, 40 s think time.
func DefaultChat() ChatConfig {
	return ChatConfig{
		SystemPrompts: 8,
		SystemLen:     LogNormal(1500, 0.6),
		UserLen:       LogNormal(300, 1.0),
		OutputLen:     LogNormal(350, 0.8),
		Turns:         LogNormal(6, 0.8),
		Think:         LogNormal(40, 1.0),
	}
}

func (c ChatConfig) validate() error {
	return validateShape("chat", c.SystemPrompts, c.SystemLen, c.UserLen, c.OutputLen, c.Turns, c.Think)
}

func newChat(c ChatConfig, zipf float64, r *rand.Rand, b *blocker, genPerToken float64, maxContext int) shape {
	return newGrowing(ShapeChat, growConfig{
		systems: c.SystemPrompts, systemLen: c.SystemLen, zipf: zipf,
		first: c.UserLen, appended: c.UserLen, output: c.OutputLen, steps: c.Turns, gap: c.Think,
	}, r, b, genPerToken, maxContext)
}
