package config

import (
	"slices"
	"strings"
)

// DefaultPriorityLevels are Priority.Levels when none are configured.
var DefaultPriorityLevels = []string{"interactive", "background", "batch"}

// LevelNames returns Levels lowercased, or DefaultPriorityLevels.
func (p Priority) LevelNames() []string {
	if len(p.Levels) == 0 {
		return slices.Clone(DefaultPriorityLevels)
	}
	out := make([]string, len(p.Levels))
	for i, l := range p.Levels {
		out[i] = strings.ToLower(l)
	}
	return out
}

// DefaultLevel returns Default lowercased, or the first level.
func (p Priority) DefaultLevel() string {
	if p.Default != "" {
		return strings.ToLower(p.Default)
	}
	return p.LevelNames()[0]
}
