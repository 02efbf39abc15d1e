// Package testkit holds what the tests of several packages share: the
// repository's commands built once per test binary (RunWithBinaries), and
// waiting for a condition under a deadline that ends early on success
// (Eventually). Only tests import it.
//
// Its helpers are written for a shared, busy machine: deadlines are
// generous because they cost nothing when the condition holds early, and
// nothing here assumes how fast the machine is.
package testkit
