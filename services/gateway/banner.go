package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// writeBanner tells a first-time user how to call the gateway listening on
// addr: with token (see auth.DevToken) in ready-to-paste curl commands for
// a chat model cfg serves, or how to mint one when token is "". The token
// is printed only when addr is a loopback address: on any other address the
// banner (a terminal, a container log) would hand every reader a working
// all-models token for the network the gateway serves (issue 41, finding 18).
func writeBanner(w io.Writer, cfg *config.Config, addr, token string) {
	url := "http://" + addr
	fmt.Fprintf(w, "\nTollgate is listening on %s\n", url)
	if token != "" && !loopbackAddr(addr) {
		fmt.Fprintf(w, "The listener is not on loopback, so no development token is printed: mint one with `tollctl token`.\n\n")
		return
	}
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

// loopbackAddr reports whether addr (host:port) is on a loopback IP. Names
// and wildcard addresses (0.0.0.0, ::) are not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// devSecretExposed reports whether an issuer of cfg verifies with the
// published auth.PublicDevSecret while the public listener on addr is not
// on loopback: anyone who can reach it can mint tokens it accepts.
func devSecretExposed(cfg *config.Config, addr string) bool {
	return !loopbackAddr(addr) && auth.UsesPublicDevSecret(cfg.Auth)
}

// warnDevSecret logs a warning when devSecretExposed, and exports the same
// condition on reg as the gauge tollgate_auth_public_dev_secret_exposed,
// read at each scrape from the running config (so a reload shows).
func warnDevSecret(reg prometheus.Registerer, log *slog.Logger, running func() *config.Config, addr string) error {
	if devSecretExposed(running(), addr) {
		log.Warn("the public development HS256 secret verifies tokens on a listener that is not loopback: anyone can mint a token it accepts; set TOLLGATE_DEV_SECRET or use an RS256/ES256/EdDSA issuer",
			"addr", addr)
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tollgate_auth_public_dev_secret_exposed",
		Help: "1 while an issuer verifies with the published development secret and the public listener is not on loopback.",
	}, func() float64 {
		if devSecretExposed(running(), addr) {
			return 1
		}
		return 0
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register dev secret metric: %w", err)
	}
	return nil
}
