// Package testkit holds what the tests of several packages share: the
// repository's commands built once per test binary (RunWithBinaries), a
// throwaway certificate authority (CA) and TLS handshakes (Handshake).
// Only tests import it.
//
// Its helpers are written for a shared, busy machine: deadlines are
// generous because they cost nothing when the condition holds early, and
// nothing here assumes how fast the machine is.
package testkit
