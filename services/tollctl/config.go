package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// configCheck loads and validates the config file args[0], then builds its
// price table (reading price_book) and loads the keys its issuers name, as
// the gateway would at startup. It prints a
// summary on success, or every problem, one per line, on stderr.
func (a *app) configCheck(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: want exactly one FILE", errUsage)
	}
	file := args[0]
	c, err := a.loadConfig(file)
	var prices *pricing.Table
	if err == nil {
		prices, err = c.PriceTable()
	}
	if err == nil && len(c.Auth.Issuers) > 0 {
		ac := c.Auth
		ac.CacheSize = -1 // only the keys matter here
		_, err = auth.NewVerifier(ac, a.now)
	}
	if err != nil {
		for _, p := range problems(err) {
			fmt.Fprintf(a.stderr, "%s: %v\n", file, p)
		}
		return errReported
	}
	_, err = fmt.Fprintf(a.stdout, "ok: %d providers, %d models, %d issuers, prices %s\n",
		len(c.Providers), len(c.Models), len(c.Auth.Issuers), prices.Version)
	return err
}

// loadConfig reads and parses file with the app's environment.
func (a *app) loadConfig(file string) (*config.Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := config.Parse(data, a.getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return c, nil
}

// problems lists the errors joined in err (config validation returns them
// all at once), or err alone.
func problems(err error) []error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		return joined.Unwrap()
	}
	return []error{err}
}
