package httpproxy

import (
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
)

func TestMain(m *testing.M) { gfetest.MainWithPoller(m) }
