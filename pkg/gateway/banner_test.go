package gateway

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestWriteBanner(t *testing.T) {
	tests := []struct {
		name   string
		models []config.Model
		token  string
		want   []string
		absent []string
	}{
		{"no token", []config.Model{{Name: "mock-gpt"}}, "",
			[]string{"listening on http://127.0.0.1:8080", "Mint a token with `tollctl token`"}, []string{"curl"}},
		{"token and a chat model", []config.Model{{Name: "gemini/*"}, {Name: "mock-gpt"}}, "TOK",
			[]string{"Bearer TOK", `"model":"mock-gpt"`, `"stream":true`, "http://127.0.0.1:8080/v1/chat/completions"}, []string{"gemini/*"}},
		{"only wildcard routes", []config.Model{{Name: "gemini/*"}}, "TOK",
			[]string{"A development token (valid 24h): TOK", "wildcard route"}, []string{"curl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			WriteBanner(&b, &config.Config{Models: tt.models}, "127.0.0.1:8080", tt.token)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("banner lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("banner has %q:\n%s", a, b.String())
				}
			}
		})
	}
}
