package config

import (
	"io"
	"log/slog"
)

// NewLogger returns the slog logger the log section describes, writing to w
// (the programs pass os.Stderr).
func (l Log) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level)) // validated by Load; "" is info
	o := &slog.HandlerOptions{Level: level}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, o))
	}
	return slog.New(slog.NewJSONHandler(w, o))
}
