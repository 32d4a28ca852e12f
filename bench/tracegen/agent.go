package tracegen

import "math/rand/v2"

// Agent is an agentic loop: a system prompt with tool definitions (a few,
// Zipf popularity) and a task, then many steps. Each step the model answers
// with a short tool call (OutputLen); the tool runs (ToolTime, seconds) and
// its output (ToolLen) is appended, so step n's prompt is step n-1's prompt
// + its tool call + the tool's output: the context grows every step and each
// step extends the previous one.
type AgentConfig struct {
	SystemPrompts int
	SystemLen     Dist // tokens of each system prompt with tool schemas
	TaskLen       Dist // tokens of the task message
	ToolLen       Dist // tokens of each tool output
	OutputLen     Dist // tokens of each tool call
	Steps         Dist // steps per loop
	ToolTime      Dist // seconds from a tool call to the next step
}

// DefaultAgent is a coding/browsing agent: 4 system prompts of about 3,000
// tokens, tasks of 300, tool outputs of 700 with a long tail, tool calls of
// 80, 15 steps on average, 3 s per tool call.
func DefaultAgent() AgentConfig {
	return AgentConfig{
		SystemPrompts: 4,
		SystemLen:     LogNormal(3000, 0.4),
		TaskLen:       LogNormal(300, 1.0),
		ToolLen:       LogNormal(700, 1.2),
		OutputLen:     LogNormal(80, 0.6),
		Steps:         LogNormal(15, 0.7),
		ToolTime:      LogNormal(3, 1.0),
	}
}

func (c AgentConfig) validate() error {
	return validateShape("agent", c.SystemPrompts, c.SystemLen, c.TaskLen, c.ToolLen, c.OutputLen, c.Steps, c.ToolTime)
}

func newAgent(c AgentConfig, zipf float64, r *rand.Rand, b *blocker, genPerToken float64, maxContext int) shape {
	return newGrowing(ShapeAgent, growConfig{
		systems: c.SystemPrompts, systemLen: c.SystemLen, zipf: zipf,
		first: c.TaskLen, appended: c.ToolLen, output: c.OutputLen, steps: c.Steps, gap: c.ToolTime,
	}, r, b, genPerToken, maxContext)
}
