package audit

import "context"

// actorKey is the context key of the actor of an operator request.
type actorKey struct{}

// WithActor returns ctx carrying who makes the change, for code that
// records it further down (a reload behind POST /admin/reload or SIGHUP).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// Actor returns the actor WithActor put in ctx, or "unknown".
func Actor(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return "unknown"
}
