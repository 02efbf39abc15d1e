package gossipbench

import (
	"context"
	"encoding/json"
	"os"
	"github.com/rs/zerolog"
	"testing"
	"time"
)

func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Nodes: 60, Log: zerolog.New(os.Stderr).Level(zerolog.InfoLevel), Changes: 3, Window: 5 * time.Second, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", b)
}
