package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// defaultSecretEnv names the variable holding the dev issuer's HMAC secret.
const defaultSecretEnv = "TOLLGATE_DEV_SECRET"

// tokenFlags are the flags of `tollctl token`.
type tokenFlags struct {
	sub, dept, team, project, models, jti string
	priority                              string
	ttl                                   time.Duration
	admin                                 bool
	rpm, tpm                              int64
	issuer, configFile, aud, kid, alg     string
	secretEnv, secretFile                 string
}

func setupToken(a *app, fs *pflag.FlagSet) func([]string) error {
	var f tokenFlags
	fs.StringVar(&f.sub, "sub", "", "subject (sub claim); required")
	fs.StringVar(&f.dept, "dept", "", "department claim")
	fs.StringVar(&f.team, "team", "", "team claim")
	fs.StringVar(&f.project, "project", "", "project claim")
	fs.StringVar(&f.models, "models", "", "comma-separated model globs the token may use, e.g. \"gpt-4o*,mock-*\" (default all models)")
	fs.StringVar(&f.jti, "jti", "", "key id (jti claim) that budgets of scope key count against (default random)")
	fs.DurationVar(&f.ttl, "ttl", 24*time.Hour, "token lifetime")
	fs.BoolVar(&f.admin, "admin", false, "grant the admin claim")
	fs.Int64Var(&f.rpm, "rpm", 0, "requests-per-minute limit claim (0: none)")
	fs.Int64Var(&f.tpm, "tpm", 0, "tokens-per-minute limit claim (0: none)")
	fs.StringVar(&f.priority, "priority", "", "priority claim: the highest request priority (a name of the gateway's priority.levels; default none, which takes priority.default)")
	fs.StringVar(&f.issuer, "issuer", "dev", "issuer: with --config, the name of an auth.issuers entry; without, the iss claim itself")
	flagConfig.stringVar(a, fs, &f.configFile)
	fs.StringVar(&f.aud, "aud", "", "audience (aud claim); overrides the config's")
	fs.StringVar(&f.kid, "kid", "", "key id for the token header; overrides the config's")
	fs.StringVar(&f.alg, "alg", "", "HMAC algorithm: HS256, HS384 or HS512 (default the issuer's first HS algorithm, else HS256)")
	fs.StringVar(&f.secretEnv, "secret-env", defaultSecretEnv, "environment variable holding the HMAC secret")
	fs.StringVar(&f.secretFile, "secret-file", "", "`FILE` holding the HMAC secret (trailing newline ignored)")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
		}
		set := map[string]bool{}
		fs.Visit(func(fl *pflag.Flag) { set[fl.Name] = true })
		return a.token(f, set)
	}
}

// token mints a token from f and prints it alone on stdout. set holds the
// names of the flags given on the command line, which override the config.
func (a *app) token(f tokenFlags, set map[string]bool) error {
	if f.sub == "" {
		return fmt.Errorf("%w: --sub is required", errUsage)
	}
	if f.ttl <= 0 {
		return fmt.Errorf("%w: --ttl must be positive", errUsage)
	}
	o := auth.MintOptions{
		Issuer: f.issuer, Audience: f.aud, Subject: f.sub, KeyID: f.jti,
		Dept: f.dept, Team: f.team, Project: f.project,
		TTL: f.ttl, Admin: f.admin, RPM: f.rpm, TPM: f.tpm, Priority: f.priority,
		Alg: f.alg, KID: f.kid,
	}
	if set["models"] {
		o.Models = splitList(f.models)
	}
	var cfgKey *config.Key
	if f.configFile != "" {
		is, err := a.configIssuer(f.configFile, f.issuer)
		if err != nil {
			return err
		}
		o.Issuer, o.Claims = is.Issuer, is.Claims
		if !set["aud"] {
			o.Audience = is.Audience
		}
		if !set["alg"] {
			if o.Alg = firstHMAC(is.Algorithms); o.Alg == "" {
				return fmt.Errorf("issuer %q pins no HS256, HS384 or HS512 algorithm; tollctl signs with a shared secret only", is.Name)
			}
		}
		cfgKey = hmacKey(is, f.kid)
		if cfgKey != nil && !set["kid"] {
			o.KID = cfgKey.KID
		}
	}
	secret, err := a.secret(f, set, cfgKey)
	if err != nil {
		return err
	}
	o.Key = secret
	tok, err := auth.Mint(o, a.now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.stdout, tok)
	return err
}

// configIssuer loads file and returns its issuer called name.
func (a *app) configIssuer(file, name string) (*config.Issuer, error) {
	c, err := a.loadConfig(file)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range c.Auth.Issuers {
		if c.Auth.Issuers[i].Name == name {
			return &c.Auth.Issuers[i], nil
		}
		names = append(names, c.Auth.Issuers[i].Name)
	}
	return nil, fmt.Errorf("issuer %q is not in %s (it has: %s)", name, file, strings.Join(names, ", "))
}

// secret returns the HMAC secret, from the first of: --secret-file,
// an explicit --secret-env, the issuer's configured HMAC key, the default
// environment variable.
func (a *app) secret(f tokenFlags, set map[string]bool, cfgKey *config.Key) ([]byte, error) {
	if f.secretFile != "" {
		return readSecretFile(f.secretFile)
	}
	if cfgKey == nil || set["secret-env"] {
		if v := a.getenv(f.secretEnv); v != "" {
			return []byte(v), nil
		}
		return nil, fmt.Errorf("no signing secret: %s is empty (set it, or pass --secret-env NAME or --secret-file FILE)", f.secretEnv)
	}
	if cfgKey.Secret != "" {
		return []byte(cfgKey.Secret), nil
	}
	return readSecretFile(cfgKey.SecretFile)
}

// readSecretFile reads a secret the way the gateway does: without the
// trailing newline editors add.
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read secret: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("read secret: %s is empty", path)
	}
	return b, nil
}

// hmacKey returns the issuer's first key holding an HMAC secret (with kid
// when kid is set), or nil.
func hmacKey(is *config.Issuer, kid string) *config.Key {
	for i := range is.Keys {
		k := &is.Keys[i]
		if (k.Secret != "" || k.SecretFile != "") && (kid == "" || k.KID == kid) {
			return k
		}
	}
	return nil
}

// firstHMAC returns the first HS* algorithm of algs, or "".
func firstHMAC(algs []string) string {
	for _, alg := range algs {
		if strings.HasPrefix(alg, "HS") {
			return alg
		}
	}
	return ""
}

// splitList splits a comma-separated list, dropping blanks; never nil.
func splitList(s string) []string {
	out := []string{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
