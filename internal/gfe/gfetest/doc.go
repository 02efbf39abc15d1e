// Package gfetest holds the hand-written fakes and fixtures the gfe's
// packages share in their tests: a stand-in planner over a real
// routing.Builder and a fake clock (Planner, which implements
// httpproxy.Planner and tcpproxy.State), configs rendered and parsed by the
// real loader (TwoRegionConfig, SessionConfig, TCPConfig), a seeded
// concurrent-safe random source (Rand), certificates for https listeners
// from testkit's CA (IssueCert), and a TCP echo backend with a client and a
// harness that serves a tcp listener under the fake clock (EchoBackend,
// TCPClient, ServeTCP), and an HTTP/1.1 backend that sends bytes after its
// answers that nobody asked for (StrayBackend, Strays).
//
// Only tests import it. Its helpers take a testing.TB and fail it on error;
// blocking waits are bounded by TCPTestTimeout, a guard against hangs, never
// a delay a test relies on.
package gfetest
