package console

import "context"

// NewSessionForTest starts a session for u as a sign-in would and returns
// the cookie value and the session's CSRF token, so that tests of the
// role table need not sign in through a provider for every role.
func (c *Console) NewSessionForTest(ctx context.Context, u User) (id, csrf string, err error) {
	id, s, err := c.sessions.create(ctx, u, c.o.Config().Console.SessionTTL)
	if err != nil {
		return "", "", err
	}
	return id, s.CSRF, nil
}
