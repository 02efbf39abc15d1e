// Package cpclient is the gfe's side of the control-plane protocol
// (proto/spillway/v1, docs/design.md §5, STYLE §25): it keeps a StreamSnapshots
// stream open to one control-plane replica, turns every pushed snapshot
// into the domain snapshot.Snapshot (snapshot.FromProto: the configuration parsed with
// config.ParseSnapshot, which ignores and names fields of a newer release,
// and the health of its instances), hands it to the gfe's validate-and-apply
// callback, and ACKs or NACKs it. Its first request states the
// configuration fields this build reads (Config.Fields), so that the
// control plane sends only those; Status counts the NACKs in a row, which
// the gfe shows on /readyz, /status and its metrics.
//
// Use:
//
//	c, err := cpclient.New(cpclient.Config{
//		Addresses: []string{"10.0.0.1:7000", "10.0.0.2:7000"},
//		Node: "gfe-nyc-1", Site: "nyc",
//		BackoffMin: 200 * time.Millisecond, BackoffMax: 10 * time.Second,
//		KeepaliveTime: 10 * time.Second, KeepaliveTimeout: 5 * time.Second,
//	}, cpclient.Options{Logger: log, Apply: gfe.applySnapshot})
//	...
//	g.Go(func() error { return c.Run(ctx) })
//
// (or start from DefaultConfig and set Addresses, Node and Site).
//
// Static stability (docs/design.md §4): the client never drops the last
// snapshot it accepted. A rejected push, a broken stream, or every control
// plane being down leaves Current as it was, so the gfe keeps serving; Run
// retries the replicas in turn with exponential backoff and jitter, and the
// first push from one that answers is applied.
//
// Threading: Apply runs on Run's goroutine, one snapshot at a time, in
// arrival order; Current, Changes and Status may be called from anywhere.
// See Client.
package cpclient
