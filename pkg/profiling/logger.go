package profiling

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// maxFormats bounds the message kinds limitedLogger tracks; pyroscope-go
// uses a few dozen fixed format strings.
const maxFormats = 256

// limitedLogger adapts pyroscope-go's printf logger to slog at debug level,
// letting through each kind of message (its format string) at most once
// per interval and counting the ones it held back.
type limitedLogger struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind // guarded by mu
}

// kind is the rate-limit state of one format string.
type kind struct {
	next       time.Time // earliest time the next message may be logged
	suppressed int       // messages held back since the last one logged
}

func newLimitedLogger(log *slog.Logger, every time.Duration, now func() time.Time) *limitedLogger {
	return &limitedLogger{log: log, every: every, now: now, kinds: map[string]*kind{}}
}

// Infof implements pyroscope.Logger.
func (l *limitedLogger) Infof(format string, args ...any) { l.emit("info", format, args) }

// Debugf implements pyroscope.Logger.
func (l *limitedLogger) Debugf(format string, args ...any) { l.emit("debug", format, args) }

// Errorf implements pyroscope.Logger.
func (l *limitedLogger) Errorf(format string, args ...any) { l.emit("error", format, args) }

func (l *limitedLogger) emit(level, format string, args []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	suppressed, ok := l.allow(format)
	if !ok {
		return
	}
	attrs := []any{"pyroscope_level", level, "detail", fmt.Sprintf(format, args...)}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	l.log.Log(ctx, slog.LevelDebug, "pyroscope", attrs...)
}

// allow reports whether a message of this format may be logged now, and
// how many were held back since the last one.
func (l *limitedLogger) allow(format string) (suppressed int, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[format]
	if k == nil {
		if len(l.kinds) >= maxFormats {
			clear(l.kinds)
		}
		k = &kind{}
		l.kinds[format] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		return 0, false
	}
	suppressed, k.suppressed, k.next = k.suppressed, 0, now.Add(l.every)
	return suppressed, true
}
