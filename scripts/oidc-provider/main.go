// Command oidc-provider serves a real OpenID Provider on a loopback
// address for the console's browser tests: the example provider of
// github.com/zitadel/oidc/v3 (its op package, login form and in-memory
// storage) with one confidential client and test users given by flags.
// Every user's ID token and userinfo answer carry sub, email, name and the
// user's other claims (for example dept and role, or groups as a list), so
// that the console's claim-to-role mapping is tested against the tokens of
// a real provider, not a hand-written fake. It is a test tool: no
// production code imports it.
//
//	oidc-provider [-listen 127.0.0.1:9998] [-issuer URL] -client-id ID -client-secret S \
//	  -redirect-uri URI -user 'sub=alice,password=pw,email=alice@example.test,dept=eng,role=admin' ...
//
// It prints "issuer URL" on standard output once it accepts connections
// (with -listen 127.0.0.1:0 the port is the one the kernel chose), and
// stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "oidc-provider:", err)
		os.Exit(1)
	}
}

// userFlags collects the repeated -user flag.
type userFlags []user

func (u *userFlags) String() string { return fmt.Sprint(len(*u), " users") }

func (u *userFlags) Set(v string) error {
	usr, err := parseUser(v)
	if err != nil {
		return err
	}
	*u = append(*u, usr)
	return nil
}

// run serves until ctx ends, and writes the issuer line to out when ready.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("oidc-provider", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9998", "loopback `address` to serve on (port 0: any free port)")
	issuer := fs.String("issuer", "", "issuer `URL` (default http://ADDRESS, the address served on); its path must be empty")
	clientID := fs.String("client-id", "tollgate-console", "the confidential client's `id`")
	clientSecret := fs.String("client-secret", "", "the confidential client's `secret` (required)")
	var redirects stringList
	fs.Var(&redirects, "redirect-uri", "a redirect `URI` the client may use (repeat for more; at least one)")
	var users userFlags
	fs.Var(&users, "user", "a test user: `sub=ID,password=PW[,email=E][,name=N][,groups=A|B][,CLAIM=VALUE...]` (repeat for more)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *clientSecret == "" || len(redirects) == 0 || len(users) == 0 {
		return errors.New("-client-secret, -redirect-uri and at least one -user are required")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("parse -listen: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %s: a test provider serves on a loopback address only", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	iss := *issuer
	if iss == "" {
		iss = "http://" + ln.Addr().String()
	}
	if u, err := url.Parse(iss); err != nil || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		ln.Close()
		return fmt.Errorf("-issuer %q: want scheme://host[:port] with no path", iss)
	}

	store := newUserStore(users)
	clients := map[string]*storage.Client{*clientID: storage.WebClient(*clientID, *clientSecret, redirects...)}
	st := &claimStorage{Storage: storage.NewStorageWithClients(store, clients), users: store}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := &http.Server{
		Handler:           exampleop.SetupServer(iss, st, log, false),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintln(out, "issuer", iss)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// stringList collects a repeated string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// user is a test user: the example storage's User and the claims it
// lacks.
type user struct {
	storage.User
	claims map[string]any // dept, role, groups ([]string) and the like
}

// parseUser reads sub=ID,password=PW,email=E,name=N,groups=A|B,CLAIM=V.
func parseUser(v string) (user, error) {
	u := user{claims: map[string]any{}}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return u, fmt.Errorf("user %q: %q is not key=value", v, kv)
		}
		switch k {
		case "sub":
			u.ID, u.Username = val, val
		case "password":
			u.Password = val
		case "email":
			u.Email, u.EmailVerified = val, true
		case "name":
			u.FirstName = val
		case "groups":
			u.claims[k] = strings.Split(val, "|")
		case "iss", "aud", "exp", "iat", "nonce", "azp", "auth_time", "email_verified":
			return u, fmt.Errorf("user %q: %s is set by the provider", v, k)
		default:
			u.claims[k] = val
		}
	}
	if u.ID == "" || u.Password == "" {
		return u, fmt.Errorf("user %q: sub and password are required", v)
	}
	if u.FirstName == "" {
		u.FirstName = u.ID
	}
	return u, nil
}

// userStore is the example storage's UserStore over the -user flags.
type userStore map[string]*user

func newUserStore(users []user) userStore {
	s := userStore{}
	for i := range users {
		s[users[i].ID] = &users[i]
	}
	return s
}

func (s userStore) GetUserByID(id string) *storage.User {
	if u, ok := s[id]; ok {
		return &u.User
	}
	return nil
}

// GetUserByUsername finds a user by the name typed in the login form,
// which is the user's sub.
func (s userStore) GetUserByUsername(name string) *storage.User { return s.GetUserByID(name) }

// ExampleClientID names the example storage's service user (for its JWT
// profile grant, unused here).
func (s userStore) ExampleClientID() string { return storage.ServiceUserID }

// claimStorage is the example storage with every user's claims in the ID
// token and the userinfo answer, whatever the scopes: the example asserts
// email and profile claims into the ID token only without an access
// token, and has no place for dept or role claims.
type claimStorage struct {
	*storage.Storage
	users userStore
}

var _ op.CanSetUserinfoFromRequest = (*claimStorage)(nil)

// SetUserinfoFromRequest fills the claims of an ID token.
func (s *claimStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	return s.addClaims(info, req.GetSubject())
}

// SetUserinfoFromToken fills the userinfo endpoint's answer.
func (s *claimStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	if info.Subject != "" {
		subject = info.Subject
	}
	return s.addClaims(info, subject)
}

func (s *claimStorage) addClaims(info *oidc.UserInfo, sub string) error {
	u, ok := s.users[sub]
	if !ok {
		return fmt.Errorf("user %q not found", sub)
	}
	info.Subject = u.ID
	info.Name = u.FirstName
	if u.Email != "" {
		info.Email, info.EmailVerified = u.Email, oidc.Bool(true)
	}
	for k, v := range u.claims {
		info.AppendClaims(k, v)
	}
	return nil
}
