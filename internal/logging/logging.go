// Package logging builds the zerolog logger every Spillway daemon uses:
// JSON lines by default, a human console format when the output is a
// terminal (or when asked for).
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// New returns a logger writing to w in format "json", "console" or "auto"
// (console when w is a terminal, else JSON), at level ("debug", "info",
// "warn", "error"), with the daemon's name as field "daemon".
func New(w io.Writer, format, level, daemon string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("log level %q: %w", level, err)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	case "auto", "":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: must be json, console or auto", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("daemon", daemon).Logger(), nil
}
