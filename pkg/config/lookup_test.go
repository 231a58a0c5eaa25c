package config

import "testing"

func TestExampleChatModel(t *testing.T) {
	tests := []struct {
		name   string
		models []Model
		want   string // "" for none
	}{
		{"mock-gpt wins", []Model{{Name: "gpt-4o"}, {Name: "mock-gpt"}}, "mock-gpt"},
		{"wildcard first is skipped", []Model{{Name: "gemini/*"}, {Name: "gpt-4o"}}, "gpt-4o"},
		{"embeddings are skipped", []Model{{Name: "embed", Type: ModelTypeEmbeddings}, {Name: "chat"}}, "chat"},
		{"only wildcards", []Model{{Name: "gemini/*"}, {Name: "*-latest"}}, ""},
		{"no models", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Models: tt.models}
			got, ok := c.ExampleChatModel()
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("ExampleChatModel() = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
