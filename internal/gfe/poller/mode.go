package poller

import "fmt"

// Mode says when a Group's Pollers are on.
type Mode uint8

const (
	// Auto: on while goroutines queue for a P (Busy).
	Auto Mode = iota
	// On: always (on Linux).
	On
	// Off: never; reads wait in Go's poller alone.
	Off
)

// String returns "auto", "on" or "off".
func (m Mode) String() string {
	switch m {
	case On:
		return "on"
	case Off:
		return "off"
	}
	return "auto"
}

// ParseMode parses "auto", "on" or "off".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return Auto, nil
	case "on":
		return On, nil
	case "off":
		return Off, nil
	}
	return Auto, fmt.Errorf("poller mode %q: want auto, on or off", s)
}
