package gateway

import (
	"fmt"
	"io"

	"github.com/tollgate/tollgate/pkg/config"
)

// WriteBanner tells a first-time user how to call the gateway listening on
// addr: with token (see auth.DevToken) in ready-to-paste curl commands for
// a chat model cfg serves, or how to mint one when token is "".
func WriteBanner(w io.Writer, cfg *config.Config, addr, token string) {
	url := "http://" + addr
	fmt.Fprintf(w, "\nTollgate is listening on %s\n", url)
	if token == "" {
		fmt.Fprintf(w, "Mint a token with `tollctl token` and call %s/v1/chat/completions.\n\n", url)
		return
	}
	model, ok := cfg.ExampleChatModel()
	if !ok {
		fmt.Fprintf(w, "A development token (valid 24h): %s\nEvery chat model is a wildcard route: send a concrete name it matches.\n\n", token)
		return
	}
	fmt.Fprintf(w, "A development token (valid 24h) is in the commands below.\n\n")
	fmt.Fprintf(w, "  curl -s %s/v1/chat/completions \\\n    -H 'Authorization: Bearer %s' \\\n    -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n", url, token, model)
	fmt.Fprintf(w, "Streaming:\n\n  curl -sN %s/v1/chat/completions \\\n    -H 'Authorization: Bearer %s' \\\n    -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n", url, token, model)
}
