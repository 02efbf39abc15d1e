package snapshot

import (
	"strconv"
	"time"

	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// push is a valid pushed snapshot: group g1 of 127.0.0.1:9001 (healthy)
// and 127.0.0.1:9002 (healthy9002), rate its max_rate_per_instance.
func push(version, nonce string, rate int, healthy9002 bool) *pb.Snapshot {
	return &pb.Snapshot{
		Version: version, Nonce: nonce, ConfigSource: "cp.yaml", ControlPlaneId: "cp-test",
		ConfigYaml: []byte(`regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: 127.0.0.1:9001
              - address: 127.0.0.1:9002
services:
  - name: web
    backends:
      - group: g1
        max_rate_per_instance: ` + strconv.Itoa(rate) + `
routes:
  - service: web
`),
		Health: []*pb.InstanceHealth{
			{Group: "g1", Address: "127.0.0.1:9001", Healthy: true},
			{Group: "g1", Address: "127.0.0.1:9002", Healthy: healthy9002, Detail: "refused"},
		},
	}
}
