package usage

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// StreamName is the JetStream stream holding every usage event.
	StreamName = "TOLLGATE_USAGE"
	// SubjectPrefix starts the subject of every usage event; the event's
	// department, made a valid subject token, follows it.
	SubjectPrefix = "tollgate.usage."
	// noDept is the subject token used for events without a department.
	noDept = "_none"
)

// StreamConfig sets the stream's durability and retention. Zero fields take
// the documented defaults.
type StreamConfig struct {
	// Replicas of the stream. Default 1; 3 in a NATS cluster.
	Replicas int
	// MaxAge after which events leave the stream. Default 400 days, so a
	// full year can be replayed.
	MaxAge time.Duration
	// DuplicateWindow of the Nats-Msg-Id deduplication: an event republished
	// within it (after a crash or an ack timeout) is stored once. Default 2m.
	DuplicateWindow time.Duration
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxAge == 0 {
		c.MaxAge = 400 * 24 * time.Hour
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	return c
}

// EnsureStream creates the usage stream, or updates its settings when it
// exists. It is safe to call from every process at startup.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	cfg = cfg.withDefaults()
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Tollgate usage events, one per gateway request",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
	})
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", StreamName, err)
	}
	return nil
}

// Subject returns the subject an event of department dept is published on.
// The department becomes one valid subject token: empty is "_none", and
// '.', '*', '>' and white space are replaced by '_'.
func Subject(dept string) string {
	if dept == "" {
		return SubjectPrefix + noDept
	}
	if strings.IndexFunc(dept, badTokenRune) < 0 {
		return SubjectPrefix + dept
	}
	var b strings.Builder
	b.Grow(len(SubjectPrefix) + len(dept))
	b.WriteString(SubjectPrefix)
	for _, r := range dept {
		if badTokenRune(r) {
			r = '_'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func badTokenRune(r rune) bool {
	return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r)
}
