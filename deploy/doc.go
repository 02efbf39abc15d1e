// Package deploy holds what installs Spillway on real hosts, and the tests
// that check it against the real binaries. It has no Go code of its own.
//
//   - build.sh builds the release binaries: static (CGO_ENABLED=0), -trimpath,
//     stamped with their version (internal/version), as spillway-<command>.
//   - systemd/spillway-controlplane.service and systemd/spillway-gfe.service
//     run them as the spillway user (sysusers.d/spillway.conf) in a
//     read-only sandbox; env/*.env are examples of the per-host settings
//     they read from /etc/spillway.
//   - mkcerts.sh makes the CA and the per-host certificates for mutual TLS.
//   - rootfs.sh lays out the container image's files (build.sh's binaries,
//     a CA bundle, the user spillway 65532); Containerfile packages them
//     FROM scratch with podman and no registry, Dockerfile runs rootfs.sh
//     in a golang build stage for the same image.
//
// The file layout on a host (docs/DEPLOY.md installs it):
//
//	/usr/local/bin/spillway-controlplane, spillway-gfe   binaries (root, 0755)
//	/etc/spillway/                                      root:spillway 0750
//	    controlplane.yaml        the configuration (control planes only), 0640
//	    controlplane.env | gfe.env   per-host flags as SPILLWAY_CP_* / SPILLWAY_GFE_*, 0640
//	    gossip.key               gossip keyring, one base64 key per line, spillway:spillway 0600
//	    secrets/                 cookie secret files named by the configuration, 0640
//	    pki/ca.crt               the CA bundle, 0644
//	    pki/node.crt, node.key   this host's certificate and key, 0644 and 0640
//
// The tests check: the build is static and prints its stamped version; the
// units pass `systemd-analyze verify` and score at most 2.0 in `systemd-analyze
// security`, carry every hardening directive, and pass only flags the binaries
// define; the env files and docs/DEPLOY.md name only real flags;
// systemd-sysusers creates the user; mkcerts.sh's certificates complete a
// mutual-TLS handshake through internal/mtls and are refused where they must
// be; the daemons start from the units' command lines and env files with
// those certificates, the gfe taking its snapshot over mutual TLS; and the
// image, built from Containerfile with Debian's podman, runs a control
// plane and a gfe as containers that serve a request (TestContainerImage).
//
// docs/DEPLOY.md's commands themselves, every sh block on the hosts it
// names, are run by internal/lab's TestDeployGuide.
package deploy
