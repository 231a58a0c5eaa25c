package kind

import "testing"

func TestList(t *testing.T) {
	tests := []struct {
		name string
		keep func(Spec) bool
		want string
	}{
		{"all", nil, "openai, azure, anthropic, gemini, bedrock or mock"},
		{"pass-through", func(s Spec) bool { return s.PassThrough }, "openai, azure or mock"},
		{"presets", func(s Spec) bool { return s.Presets != nil }, "openai"},
		{"none", func(Spec) bool { return false }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := List(tt.keep); got != tt.want {
				t.Errorf("List %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, s := range All() {
		if got, ok := Lookup(s.Name); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%q) = %q, %v", s.Name, got.Name, ok)
		}
	}
	for _, name := range []string{"", "opnai", "OpenAI"} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found a kind", name)
		}
	}
}
