package gossip

import (
	"bytes"
	"strings"

	"github.com/rs/zerolog"
)

// logWriter is the io.Writer behind memberlist's *log.Logger. memberlist
// writes one line per call, shaped "[LEVEL] memberlist: message"; logWriter
// turns each into one zerolog event at the matching level, so memberlist's
// logs join the daemon's stream. It is safe for concurrent use (zerolog
// loggers are).
type logWriter struct {
	log zerolog.Logger
}

func (w logWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		level, msg := parseLogLine(string(line))
		if level > zerolog.DebugLevel && strings.Contains(msg, "use of closed network connection") {
			// memberlist's loops race its own Shutdown: sends on
			// sockets it just closed are expected, not errors.
			level = zerolog.DebugLevel
		}
		w.log.WithLevel(level).Msg(msg)
	}
	return len(p), nil
}

// parseLogLine splits memberlist's level tag off a line. Lines without a
// known tag are logged at info level, unchanged.
func parseLogLine(line string) (zerolog.Level, string) {
	level := zerolog.InfoLevel
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, msg, ok := strings.Cut(rest, "] "); ok {
			known := true
			switch tag {
			case "DEBUG":
				level = zerolog.DebugLevel
			case "INFO":
				level = zerolog.InfoLevel
			case "WARN":
				level = zerolog.WarnLevel
			case "ERR", "ERROR":
				level = zerolog.ErrorLevel
			default:
				known = false
			}
			if known {
				line = msg
			}
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	return level, line
}
