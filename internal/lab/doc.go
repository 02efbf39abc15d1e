// Package lab runs a Spillway deployment on several hosts on one machine:
// each host is a Linux network namespace, and the real binaries run in them
// (ip netns exec), talking over real links.
//
// # Model
//
// A switch namespace (Prefix+"switch") holds bridge br0; every host
// namespace has one interface, eth0, a veth whose peer is a port of br0.
// The addresses (Config.Network, default 10.77.0.0/16) exist only inside
// these namespaces: nothing is added to the namespace the lab runs in. The
// hosts and the plan of package topology:
//
//	cp-1, cp-2               10.77.0.1, 10.77.0.2    control-plane replicas
//	gfe-nyc, -lon, -tokyo    10.77.1.1, .2.1, .3.1   one gfe per site
//	backend-us-east, …       10.77.101.1, .102.1, .103.1
//	client-nyc, …            10.77.1.100–163, …      load generators
//	switch (br0)             10.77.255.254           how this process reaches them
//
// Distances are emulated in user space (the kernel has no netem): each
// region's test backend delays its answers by the RTT of the site whose
// /24 the request comes from, so a site's gfe probes see 8 ms to its own
// region and 35–90 ms to the others (topology.Demo).
//
// Clients may reach the gfes by a name, Name (web.spillway.lab), that
// each client host resolves through its own /etc/hosts to every gfe, its
// site's first (SetDNS takes a gfe out of it and puts it back: the rolling
// restart of docs/DEPLOY.md). The route has per_try_timeout PerTryTimeout,
// so requests in flight to a backend host that vanished are retried in
// another region.
//
// The control planes and gfes talk gRPC over mutual TLS with certificates
// of a throwaway CA and gossip with a generated key (--gossip-key-file),
// under Config.StateDir/deploy.
//
// # Guarantees
//
//   - Up returns only when every gfe is ready, sees every instance healthy
//     and has measured every region's RTT; on error nothing is left.
//   - Up first runs Clean: a crashed run's namespaces and processes are
//     gone before anything is made.
//   - After Down or Clean no namespace with the prefix exists and no
//     process the lab started runs (processes found by the pid file and by
//     ip netns pids of each namespace).
//   - Every child dies with the process that started it (PR_SET_PDEATHSIG,
//     package proc), so a killed lab leaves only namespaces, which the next
//     Up or Down removes.
//
// # Other labs
//
// UpHosts makes hosts with nothing running in them. UpGuide makes the
// hosts of docs/DEPLOY.md's table, with the guide's addresses, and
// Guide.Run runs the guide's blocks on them, each host with its own /etc,
// /usr, /root, /var and /tmp (TestDeployGuide). Starter brings a lab up
// with another deployment (Config.Spec) for the real benchmark (lbbench
// --lab).
//
// It needs root and the ip command of iproute2 (RequireIP).
package lab
